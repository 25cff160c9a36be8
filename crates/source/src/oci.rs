//! Plugins in an OCI registry, in the WebAssembly artifact layout: a manifest whose config has
//! media type [`CONFIG_MEDIA_TYPE`] and whose single layer, [`LAYER_MEDIA_TYPE`], is the
//! component.
//!
//! # Guarantees
//! - [`Client::pull`] returns bytes whose sha256 is the layer digest the manifest declares, and,
//!   when a pin is given, the pinned digest; anything else is refused before the bytes are used.
//! - A layer the manifest declares above [`Options::max_layer_bytes`] is refused before it is
//!   downloaded; a registry that sends more than declared is cut off at the limit.
//! - [`Client::push`] publishes only a component the runtime can load.
//!
//! The pin is the *layer* digest (the sha256 of the component bytes, as `windlass plugin
//! inspect` and the runtime report it), so the same pin works for a plugin from a file or a
//! ConfigMap. [`Client::resolve`] returns the *manifest* digest: cheap to poll (one HEAD), it
//! changes whenever a tag is moved.

mod classify;
mod push;
mod signature;

use futures::StreamExt as _;
use oci_client::{
    Reference,
    client::{ClientConfig, ClientProtocol},
    errors::OciDistributionError,
    manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest, OciManifest},
    secrets::RegistryAuth as OciAuth,
};
use sha2::{Digest as _, Sha256};

pub use crate::auth::RegistryAuth;
use crate::{Error, Result, parse_pin};
pub use signature::{
    PublicKey, SIGNATURE_ANNOTATION, SIGNATURE_MEDIA_TYPE, Signed, SigningKey, Verified, payload,
    signature_tag,
};
use windlass_contract::Engine;

/// Media type of the config of a WebAssembly artifact.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the one layer of a WebAssembly artifact: the component.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Default for [`Options::max_layer_bytes`]: 64 MiB.
pub const DEFAULT_MAX_LAYER_BYTES: u64 = 64 << 20;

/// How to talk to registries.
#[derive(Debug, Clone)]
pub struct Options {
    /// Credentials for the reference's registry. Default: none (anonymous).
    pub auth: Option<RegistryAuth>,
    /// Speak plain HTTP to every registry. Default: false (HTTPS).
    pub plain_http: bool,
    /// Registries (`host:port`, as in references) spoken to over plain HTTP. Default: none.
    pub insecure_registries: Vec<String>,
    /// The largest layer a pull accepts, in bytes. Default: [`DEFAULT_MAX_LAYER_BYTES`].
    pub max_layer_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            auth: None,
            plain_http: false,
            insecure_registries: Vec::new(),
            max_layer_bytes: DEFAULT_MAX_LAYER_BYTES,
        }
    }
}

/// A plugin pulled and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// The component bytes.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of `bytes`: the layer digest, the one to pin.
    pub layer_digest: String,
    /// The manifest's digest, what [`Client::resolve`] returns for the tag.
    pub manifest_digest: String,
}

/// A plugin published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// `sha256:<hex>` of the component: the digest to pin.
    pub layer_digest: String,
    /// The manifest's digest.
    pub manifest_digest: String,
    /// `registry/repository@<manifest digest>`: a reference that never moves.
    pub pinned_reference: String,
}

/// A registry client with its credentials and limits. Cheap to clone; reuse it to poll tags.
#[derive(Clone)]
pub struct Client {
    client: oci_client::Client,
    options: Options,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `options`. Needs a rustls crypto provider installed
    /// ([`crate::install_crypto_provider`]) before the first HTTPS request.
    pub fn new(options: Options) -> Self {
        let protocol = if options.plain_http {
            ClientProtocol::Http
        } else if options.insecure_registries.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(options.insecure_registries.clone())
        };
        let client = oci_client::Client::new(ClientConfig {
            protocol,
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            read_timeout: Some(std::time::Duration::from_secs(60)),
            ..ClientConfig::default()
        });
        Client { client, options }
    }

    /// Pulls the plugin at `reference` (`registry/repository:tag` or `…@sha256:…`), checks the
    /// artifact layout, the size limit and `pin` (`sha256:<hex>` of the component) before
    /// downloading, and the downloaded bytes against the declared digest.
    ///
    /// # Errors
    /// [`Error::InvalidReference`], [`Error::InvalidPin`], [`Error::Unreachable`],
    /// [`Error::Unauthorized`], [`Error::NotFound`], [`Error::WrongMediaType`],
    /// [`Error::WrongLayerCount`], [`Error::TooLarge`], [`Error::DigestMismatch`],
    /// [`Error::Corrupt`], [`Error::Registry`].
    pub async fn pull(&self, reference: &str, pin: Option<&str>) -> Result<Pulled> {
        let r = parse_reference(reference)?;
        let pin = pin.map(parse_pin).transpose()?;
        let fail = |e| self.classify(&r, e);
        let (manifest, manifest_digest) = self
            .client
            .pull_manifest(&r, &self.auth())
            .await
            .map_err(fail)?;
        let manifest = match manifest {
            OciManifest::Image(m) => m,
            OciManifest::ImageIndex(i) => {
                return Err(Error::WrongMediaType {
                    reference: reference.to_string(),
                    what: "manifest",
                    found: i.media_type.unwrap_or_else(|| "an image index".into()),
                    expected: OCI_IMAGE_MEDIA_TYPE,
                });
            }
        };
        let layer = check_layout(reference, &manifest)?;
        let limit = self.options.max_layer_bytes;
        let too_large = |size: u64| Error::TooLarge {
            reference: reference.to_string(),
            size,
            limit,
        };
        if u64::try_from(layer.size).unwrap_or(0) > limit {
            return Err(too_large(layer.size as u64));
        }
        if let Some(pin) = pin
            && pin != layer.digest
        {
            return Err(Error::DigestMismatch {
                source_name: format!("oci {reference}"),
                hint: if pin == manifest_digest {
                    " (the pin is the manifest digest; pin the layer digest instead)"
                } else {
                    ""
                },
                expected: pin,
                actual: layer.digest.clone(),
            });
        }
        let mut stream = self
            .client
            .pull_blob_stream(&r, &layer)
            .await
            .map_err(fail)?;
        let mut bytes = Vec::new();
        let mut hasher = Sha256::new();
        let mut corrupt = false;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) => {
                    if (bytes.len() + chunk.len()) as u64 > limit {
                        return Err(too_large((bytes.len() + chunk.len()) as u64));
                    }
                    hasher.update(&chunk);
                    bytes.extend_from_slice(&chunk);
                }
                // oci-client's own check fired at the end of the stream; report it below with
                // the digest of what arrived.
                Err(e) if is_digest_error(&e) => corrupt = true,
                Err(e) => return Err(fail(OciDistributionError::IoError(e))),
            }
        }
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if corrupt || actual != layer.digest {
            return Err(Error::Corrupt {
                reference: reference.to_string(),
                declared: layer.digest.clone(),
                actual,
            });
        }
        Ok(Pulled {
            bytes,
            layer_digest: actual,
            manifest_digest,
        })
    }

    /// The manifest digest `reference` points at now, from one HEAD request (a GET when the
    /// registry does not send the digest header). Poll a tag with it and pull when it changes.
    ///
    /// # Errors
    /// [`Error::InvalidReference`], [`Error::Unreachable`], [`Error::Unauthorized`],
    /// [`Error::NotFound`], [`Error::Registry`].
    pub async fn resolve(&self, reference: &str) -> Result<String> {
        let r = parse_reference(reference)?;
        self.client
            .fetch_manifest_digest(&r, &self.auth())
            .await
            .map_err(|e| self.classify(&r, e))
    }

    fn auth(&self) -> OciAuth {
        match &self.options.auth {
            Some(a) => OciAuth::Basic(a.username.clone(), a.password.clone()),
            None => OciAuth::Anonymous,
        }
    }
}

/// Pulls with a client made for `options`; see [`Client::pull`].
///
/// # Errors
/// As [`Client::pull`].
pub async fn pull(reference: &str, options: &Options, pin: Option<&str>) -> Result<Pulled> {
    Client::new(options.clone()).pull(reference, pin).await
}

/// Resolves with a client made for `options`; see [`Client::resolve`].
///
/// # Errors
/// As [`Client::resolve`].
pub async fn resolve(reference: &str, options: &Options) -> Result<String> {
    Client::new(options.clone()).resolve(reference).await
}

/// Pushes with a client made for `options`; see [`Client::push`].
///
/// # Errors
/// As [`Client::push`].
pub async fn push(
    reference: &str,
    wasm: &[u8],
    engine: &dyn Engine,
    options: &Options,
) -> Result<Pushed> {
    Client::new(options.clone())
        .push(reference, wasm, engine)
        .await
}

/// The registry part of a reference (`host[:port]`), to pick credentials for it.
///
/// # Errors
/// [`Error::InvalidReference`].
pub fn registry_of(reference: &str) -> Result<String> {
    Ok(parse_reference(reference)?.registry().to_string())
}

fn parse_reference(reference: &str) -> Result<Reference> {
    reference
        .parse()
        .map_err(|e: oci_client::ParseError| Error::InvalidReference {
            reference: reference.to_string(),
            why: e.to_string(),
        })
}

/// The one wasm layer of a manifest in the WebAssembly artifact layout.
fn check_layout<'m>(
    reference: &str,
    manifest: &'m OciImageManifest,
) -> Result<&'m oci_client::manifest::OciDescriptor> {
    if manifest.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(Error::WrongMediaType {
            reference: reference.to_string(),
            what: "config",
            found: manifest.config.media_type.clone(),
            expected: CONFIG_MEDIA_TYPE,
        });
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(Error::WrongLayerCount {
            reference: reference.to_string(),
            found: manifest.layers.len(),
        });
    };
    if layer.media_type != LAYER_MEDIA_TYPE {
        return Err(Error::WrongMediaType {
            reference: reference.to_string(),
            what: "layer",
            found: layer.media_type.clone(),
            expected: LAYER_MEDIA_TYPE,
        });
    }
    Ok(layer)
}

fn is_digest_error(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<oci_client::errors::DigestError>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_normalised_with_or_without_the_prefix_and_anything_else_is_refused() {
        let hex = "AB".repeat(32);
        let want = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(parse_pin(&hex).unwrap(), want);
        assert_eq!(parse_pin(&format!("sha256:{hex}")).unwrap(), want);
        for bad in ["sha256:abc", "sha512:00", &"g".repeat(64)] {
            assert_eq!(parse_pin(bad).unwrap_err().reason(), "InvalidPin", "{bad}");
        }
    }

    #[test]
    fn a_manifest_without_the_wasm_layout_is_refused_naming_what_is_wrong() {
        let layer = |media: &str| oci_client::manifest::OciDescriptor {
            media_type: media.into(),
            digest: format!("sha256:{}", "0".repeat(64)),
            size: 1,
            ..Default::default()
        };
        let mut m = OciImageManifest::default();
        m.config.media_type = CONFIG_MEDIA_TYPE.into();
        m.layers = vec![layer(LAYER_MEDIA_TYPE)];
        assert!(check_layout("r", &m).is_ok());
        m.layers.push(layer(LAYER_MEDIA_TYPE));
        assert_eq!(
            check_layout("r", &m).unwrap_err().reason(),
            "WrongLayerCount"
        );
        m.layers = vec![layer("application/vnd.oci.image.layer.v1.tar")];
        let err = check_layout("r", &m).unwrap_err();
        assert!(err.to_string().contains("layer media type"), "{err}");
        m.config.media_type = "application/vnd.oci.image.config.v1+json".into();
        let err = check_layout("r", &m).unwrap_err();
        assert!(err.to_string().contains("config media type"), "{err}");
    }
}
