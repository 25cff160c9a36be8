//! Plugin signatures in cosign's format, so that either tool verifies what the other signed:
//! an ECDSA P-256 signature, with a public key and no transparency log, of a "simple signing"
//! payload naming the artifact's manifest digest, stored as a layer of the image tagged
//! `sha256-<hex>.sig` in the artifact's repository, the signature itself (base64 of the DER
//! form) in the layer's `dev.cosignproject.cosign/signature` annotation.
//!
//! # Guarantees
//! - [`Client::verify`] accepts a manifest digest only when a layer of its signature image
//!   holds a payload whose signature verifies with one of the keys given *and* whose claims
//!   name that digest: a signature copied from another artifact, a payload edited after
//!   signing, or a signature by any other key is refused, each named in the error.
//! - [`Client::pull_verified`] verifies before it downloads the component, and pulls by the
//!   verified digest, so a tag moved in between cannot change what is loaded.
//! - [`Client::sign`] keeps the signatures already there (a second key while keys rotate).

use std::collections::BTreeMap;

use base64::Engine as _;
use oci_client::{
    Reference,
    manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest, OciManifest},
};
use p256::ecdsa::{
    Signature,
    signature::{Signer as _, Verifier as _},
};
use p256::elliptic_curve::Generate as _;
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _, EncodePrivateKey as _};
use p256::pkcs8::{EncodePublicKey as _, LineEnding};

use super::{Client, Pulled, parse_reference};
use crate::{Error, Result};

/// Media type of a signature layer (the payload that is signed).
pub const SIGNATURE_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation that holds the signature, base64 of its DER form.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload's `critical.type`.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// A payload is a few hundred bytes; anything much larger is not one.
const MAX_PAYLOAD_BYTES: i64 = 64 << 10;
/// Signatures looked at per manifest; more than this many keys never sign one artifact.
const MAX_SIGNATURES: usize = 32;

/// A public key signatures are checked with: ECDSA P-256, as `cosign generate-key-pair` and
/// `windlass plugin keygen` write it (PEM `PUBLIC KEY`).
#[derive(Clone)]
pub struct PublicKey {
    key: p256::ecdsa::VerifyingKey,
    name: String,
    fingerprint: String,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl PublicKey {
    /// Reads a PEM public key; `name` is how messages call it (a key's name in a WasmPlugin,
    /// a file name).
    ///
    /// # Errors
    /// [`Error::InvalidKey`] naming the key when the text is not a PEM ECDSA P-256 public key.
    pub fn from_pem(name: &str, pem: &str) -> Result<Self> {
        let key = p256::ecdsa::VerifyingKey::from_public_key_pem(pem.trim()).map_err(|e| {
            Error::InvalidKey {
                key: name.to_string(),
                why: format!(
                    "not a PEM ECDSA P-256 public key (as cosign generate-key-pair or windlass \
                     plugin keygen write): {e}"
                ),
            }
        })?;
        Ok(Self::named(name, key))
    }

    fn named(name: &str, key: p256::ecdsa::VerifyingKey) -> Self {
        let der = key
            .to_public_key_der()
            .map(|d| d.as_bytes().to_vec())
            .unwrap_or_default();
        let fingerprint = windlass_contract::digest(&der);
        PublicKey {
            key,
            name: name.to_string(),
            fingerprint,
        }
    }

    /// The name given when the key was read.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sha256:<hex>` of the key's DER form (`openssl pkey -pubin -outform DER | sha256sum`).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// `NAME (sha256:<first 16 hex digits of the fingerprint>)`, as messages name a key.
    pub fn describe(&self) -> String {
        let short = self
            .fingerprint
            .get(..7 + 16)
            .unwrap_or(self.fingerprint.as_str());
        format!("{} ({short})", self.name)
    }

    /// The key as PEM (`PUBLIC KEY`).
    pub fn to_pem(&self) -> String {
        self.key
            .to_public_key_pem(LineEnding::LF)
            .unwrap_or_default()
    }
}

/// A private key plugins are signed with: ECDSA P-256, PEM PKCS#8 (`PRIVATE KEY`, as
/// `windlass plugin keygen` or `openssl genpkey -algorithm EC -pkeyopt
/// ec_paramgen_curve:P-256` write it). `cosign import-key-pair` turns one into a cosign key.
pub struct SigningKey {
    key: p256::ecdsa::SigningKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(…)")
    }
}

impl SigningKey {
    /// A new random key, from the operating system's random source.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] when the system has no random source.
    pub fn generate() -> Result<Self> {
        let key = p256::ecdsa::SigningKey::try_generate().map_err(|e| Error::InvalidKey {
            key: "new key".into(),
            why: format!("the system's random source failed: {e}"),
        })?;
        Ok(SigningKey { key })
    }

    /// Reads a PEM PKCS#8 private key; `name` is how messages call it.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] naming the key when it is not an unencrypted PKCS#8 P-256 key.
    pub fn from_pem(name: &str, pem: &str) -> Result<Self> {
        let key = p256::ecdsa::SigningKey::from_pkcs8_pem(pem.trim()).map_err(|e| {
            let hint = if pem.contains("ENCRYPTED SIGSTORE PRIVATE KEY")
                || pem.contains("ENCRYPTED COSIGN PRIVATE KEY")
            {
                " (this is a cosign key: sign with cosign, or give windlass a PKCS#8 key)"
            } else {
                ""
            };
            Error::InvalidKey {
                key: name.to_string(),
                why: format!("not an unencrypted PEM PKCS#8 ECDSA P-256 private key{hint}: {e}"),
            }
        })?;
        Ok(SigningKey { key })
    }

    /// The key as PEM PKCS#8 (`PRIVATE KEY`). Keep it secret.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] if the key cannot be encoded (it always can).
    pub fn to_pem(&self) -> Result<String> {
        self.key
            .to_pkcs8_pem(LineEnding::LF)
            .map(|pem| pem.to_string())
            .map_err(|e| Error::InvalidKey {
                key: "new key".into(),
                why: e.to_string(),
            })
    }

    /// The public half, named `name`.
    pub fn public_key(&self, name: &str) -> PublicKey {
        PublicKey::named(name, *self.key.verifying_key())
    }
}

/// A signature checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The manifest digest the signature names.
    pub manifest_digest: String,
    /// The name of the key it verified with.
    pub key: String,
    /// That key's fingerprint.
    pub fingerprint: String,
}

/// A signature published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The manifest digest signed.
    pub manifest_digest: String,
    /// Where the signature is: `registry/repository:sha256-<hex>.sig`.
    pub signature_reference: String,
    /// How many signatures that image holds now (this one and any earlier ones).
    pub signatures: usize,
}

/// The tag of the signature image of `manifest_digest`: `sha256-<hex>.sig`.
///
/// # Errors
/// [`Error::InvalidPin`] when the digest is not `sha256:<hex>`.
pub fn signature_tag(manifest_digest: &str) -> Result<String> {
    let digest = crate::parse_pin(manifest_digest)?;
    Ok(format!("{}.sig", digest.replacen(':', "-", 1)))
}

/// The payload cosign signs for `manifest_digest` in `repository` (`registry/repository`).
pub fn payload(repository: &str, manifest_digest: &str) -> Vec<u8> {
    serde_json::json!({
        "critical": {
            "identity": { "docker-reference": repository },
            "image": { "docker-manifest-digest": manifest_digest },
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    })
    .to_string()
    .into_bytes()
}

/// `name (sha256:…), name (sha256:…)`.
fn describe_keys(keys: &[PublicKey]) -> String {
    keys.iter()
        .map(PublicKey::describe)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Client {
    /// The signature image's reference for `manifest_digest` in `reference`'s repository.
    fn signature_reference(r: &Reference, manifest_digest: &str) -> Result<Reference> {
        Ok(Reference::with_tag(
            r.registry().to_string(),
            r.repository().to_string(),
            signature_tag(manifest_digest)?,
        ))
    }

    /// Signs the manifest `reference` points at now (resolved when it is a tag) with `key`, in
    /// cosign's format, adding to the signatures already there.
    ///
    /// # Errors
    /// [`Error::InvalidReference`], [`Error::Unreachable`], [`Error::Unauthorized`],
    /// [`Error::NotFound`] (nothing at the reference), [`Error::Registry`].
    pub async fn sign(&self, reference: &str, key: &SigningKey) -> Result<Signed> {
        let r = parse_reference(reference)?;
        let manifest_digest = match r.digest() {
            Some(d) => d.to_string(),
            None => self.resolve(reference).await?,
        };
        let repository = format!("{}/{}", r.registry(), r.repository());
        let payload = payload(&repository, &manifest_digest);
        let signature: Signature = key.key.sign(&payload);
        let signature =
            base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes());
        let sig_ref = Self::signature_reference(&r, &manifest_digest)?;
        let mut layers = match self.client.pull_manifest(&sig_ref, &self.auth()).await {
            Ok((OciManifest::Image(m), _)) => m.layers,
            Ok((OciManifest::ImageIndex(_), _)) => {
                return Err(Error::Registry {
                    registry: r.registry().to_string(),
                    reference: sig_ref.whole(),
                    message: "the signature tag holds an image index, not signatures".into(),
                });
            }
            Err(e) => match self.classify(&sig_ref, e) {
                Error::NotFound { .. } => Vec::new(),
                other => return Err(other),
            },
        };
        let payload_digest = windlass_contract::digest(&payload);
        // ECDSA here is deterministic (RFC 6979): signing again with the same key gives the same
        // layer, which is kept once.
        let same = |l: &OciDescriptor| {
            l.digest == payload_digest
                && l.annotations
                    .as_ref()
                    .and_then(|a| a.get(SIGNATURE_ANNOTATION))
                    == Some(&signature)
        };
        if !layers.iter().any(same) {
            layers.push(OciDescriptor {
                media_type: SIGNATURE_MEDIA_TYPE.into(),
                digest: payload_digest.clone(),
                size: payload.len() as i64,
                annotations: Some(BTreeMap::from([(
                    SIGNATURE_ANNOTATION.to_string(),
                    signature,
                )])),
                ..OciDescriptor::default()
            });
        }
        // An image config as cosign writes it: its layers are uncompressed, so each diff id is
        // the layer's digest.
        let epoch = "0001-01-01T00:00:00Z";
        let config = serde_json::json!({
            "architecture": "",
            "created": epoch,
            "history": layers.iter().map(|_| serde_json::json!({ "created": epoch })).collect::<Vec<_>>(),
            "os": "",
            "rootfs": {
                "type": "layers",
                "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>(),
            },
            "config": {},
        })
        .to_string()
        .into_bytes();
        let config_digest = windlass_contract::digest(&config);
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(OCI_IMAGE_MEDIA_TYPE.into()),
            config: OciDescriptor {
                media_type: "application/vnd.oci.image.config.v1+json".into(),
                digest: config_digest.clone(),
                size: config.len() as i64,
                ..OciDescriptor::default()
            },
            layers,
            ..OciImageManifest::default()
        };
        let signatures = manifest.layers.len();
        let body = serde_json::to_vec(&manifest).map_err(|e| Error::Registry {
            registry: r.registry().to_string(),
            reference: sig_ref.whole(),
            message: format!("serialising the signature manifest: {e}"),
        })?;
        self.push_blobs_and_manifest(
            &sig_ref.whole(),
            vec![
                (payload.into(), payload_digest),
                (config.into(), config_digest),
            ],
            body,
            OCI_IMAGE_MEDIA_TYPE,
        )
        .await?;
        Ok(Signed {
            manifest_digest,
            signature_reference: sig_ref.whole(),
            signatures,
        })
    }

    /// Checks that `manifest_digest`, in `reference`'s repository, has a signature in cosign's
    /// format by one of `keys` whose payload names that digest.
    ///
    /// # Errors
    /// [`Error::Unsigned`] when it has no signature; [`Error::SignatureInvalid`] when none
    /// verifies, saying why for each; the registry's errors as in [`Client::pull`].
    pub async fn verify(
        &self,
        reference: &str,
        manifest_digest: &str,
        keys: &[PublicKey],
    ) -> Result<Verified> {
        let r = parse_reference(reference)?;
        let sig_ref = Self::signature_reference(&r, manifest_digest)?;
        let refused = |why: String| Error::SignatureInvalid {
            reference: reference.to_string(),
            digest: manifest_digest.to_string(),
            keys: describe_keys(keys),
            why,
        };
        let manifest = match self.client.pull_manifest(&sig_ref, &self.auth()).await {
            Ok((OciManifest::Image(m), _)) => m,
            Ok((OciManifest::ImageIndex(_), _)) => {
                return Err(refused(format!("{} is an image index", sig_ref.whole())));
            }
            Err(e) => {
                return Err(match self.classify(&sig_ref, e) {
                    Error::NotFound { .. } => Error::Unsigned {
                        reference: reference.to_string(),
                        digest: manifest_digest.to_string(),
                        signature: sig_ref.whole(),
                        keys: describe_keys(keys),
                    },
                    other => other,
                });
            }
        };
        let mut reasons = Vec::new();
        for (i, layer) in manifest.layers.iter().enumerate().take(MAX_SIGNATURES) {
            match self
                .check_signature(&sig_ref, layer, manifest_digest, keys)
                .await?
            {
                Ok(key) => {
                    return Ok(Verified {
                        manifest_digest: manifest_digest.to_string(),
                        key: key.name.clone(),
                        fingerprint: key.fingerprint.clone(),
                    });
                }
                Err(why) => reasons.push(format!("signature {}: {why}", i + 1)),
            }
        }
        if reasons.is_empty() {
            reasons.push(format!("{} holds no signature", sig_ref.whole()));
        }
        Err(refused(reasons.join("; ")))
    }

    /// One layer of a signature image: `Ok(Ok(key))` when it is a signature by `key` of a
    /// payload naming `manifest_digest`, `Ok(Err(why))` when it is not.
    async fn check_signature<'k>(
        &self,
        sig_ref: &Reference,
        layer: &OciDescriptor,
        manifest_digest: &str,
        keys: &'k [PublicKey],
    ) -> Result<std::result::Result<&'k PublicKey, String>> {
        if layer.media_type != SIGNATURE_MEDIA_TYPE {
            return Ok(Err(format!(
                "media type {:?} is not a signature's",
                layer.media_type
            )));
        }
        let Some(encoded) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        else {
            return Ok(Err(format!("no {SIGNATURE_ANNOTATION} annotation")));
        };
        let signature = match base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()
            .and_then(|der| Signature::from_der(&der).ok())
        {
            Some(s) => s,
            None => return Ok(Err("not a base64 DER ECDSA P-256 signature".into())),
        };
        if layer.size > MAX_PAYLOAD_BYTES {
            return Ok(Err(format!(
                "payload of {} bytes is above {MAX_PAYLOAD_BYTES}",
                layer.size
            )));
        }
        let mut payload = Vec::new();
        self.client
            .pull_blob(sig_ref, layer, &mut payload)
            .await
            .map_err(|e| self.classify(sig_ref, e))?;
        if windlass_contract::digest(&payload) != layer.digest {
            return Ok(Err("payload does not match its digest".into()));
        }
        // The signature first: nothing in a payload is believed before it is known who signed it.
        let Some(key) = keys
            .iter()
            .find(|k| k.key.verify(&payload, &signature).is_ok())
        else {
            return Ok(Err("made by none of these keys".into()));
        };
        let claims: serde_json::Value = match serde_json::from_slice(&payload) {
            Ok(v) => v,
            Err(e) => return Ok(Err(format!("payload is not JSON: {e}"))),
        };
        let critical = &claims["critical"];
        if critical["type"] != PAYLOAD_TYPE {
            return Ok(Err(format!(
                "by {}, but its type is {}, not {PAYLOAD_TYPE:?}",
                key.describe(),
                critical["type"]
            )));
        }
        let signed = &critical["image"]["docker-manifest-digest"];
        if signed != manifest_digest {
            return Ok(Err(format!(
                "by {}, but it signs {signed}, not this manifest",
                key.describe()
            )));
        }
        Ok(Ok(key))
    }

    /// Verifies `manifest_digest` (what `reference` was resolved to) with `keys`, then pulls
    /// the plugin by that digest, checked against `pin` as [`Client::pull`] does.
    ///
    /// # Errors
    /// As [`Client::verify`], then as [`Client::pull`].
    pub async fn pull_verified(
        &self,
        reference: &str,
        manifest_digest: &str,
        pin: Option<&str>,
        keys: &[PublicKey],
    ) -> Result<(Pulled, Verified)> {
        let verified = self.verify(reference, manifest_digest, keys).await?;
        let r = parse_reference(reference)?;
        let by_digest = format!("{}/{}@{manifest_digest}", r.registry(), r.repository());
        let pulled = self.pull(&by_digest, pin).await?;
        if pulled.manifest_digest != manifest_digest {
            return Err(Error::Corrupt {
                reference: by_digest,
                declared: manifest_digest.to_string(),
                actual: pulled.manifest_digest,
            });
        }
        Ok((pulled, verified))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_round_trips_through_pem_and_signs_what_its_public_half_verifies() {
        let key = SigningKey::generate().unwrap();
        let again = SigningKey::from_pem("k", &key.to_pem().unwrap()).unwrap();
        let public = PublicKey::from_pem("k", &key.public_key("k").to_pem()).unwrap();
        let payload = payload("r/p", &format!("sha256:{}", "a".repeat(64)));
        let signature: Signature = again.key.sign(&payload);
        assert!(public.key.verify(&payload, &signature).is_ok());
        let other = SigningKey::generate().unwrap().public_key("other");
        assert!(other.key.verify(&payload, &signature).is_err());
        assert_ne!(public.fingerprint(), other.fingerprint());
        assert!(
            public.describe().starts_with("k (sha256:"),
            "{}",
            public.describe()
        );
    }

    #[test]
    fn keys_that_are_not_p256_pem_are_refused_naming_the_key() {
        let err = PublicKey::from_pem("release", "not a key").unwrap_err();
        assert_eq!(err.reason(), "InvalidKey");
        assert!(err.to_string().starts_with("key release: "), "{err}");
        let cosign = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAA==\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
        let err = SigningKey::from_pem("cosign.key", cosign).unwrap_err();
        assert!(err.to_string().contains("this is a cosign key"), "{err}");
    }

    #[test]
    fn the_signature_tag_is_cosigns() {
        let digest = format!("sha256:{}", "0f".repeat(32));
        assert_eq!(
            signature_tag(&digest).unwrap(),
            format!("sha256-{}.sig", "0f".repeat(32))
        );
        assert_eq!(signature_tag("latest").unwrap_err().reason(), "InvalidPin");
    }
}
