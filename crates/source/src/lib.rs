//! Where plugin bytes come from. This crate fetches and verifies; it never runs a plugin (the
//! runtime does, from the bytes returned here).
//!
//! - [`oci`]: pull, push and resolve plugins in an OCI registry (the WebAssembly artifact
//!   layout), with registry credentials and a sha256 pin.
//! - [`compressed`]: components stored gzip-compressed (a ConfigMap's 1 MiB), inflated with a
//!   limit.
//!
//! # Assumptions
//! The TLS stack is built without a default crypto provider: call [`install_crypto_provider`]
//! once at process start, before any registry (or Kubernetes API) connection.

pub mod auth;
pub mod compressed;
pub mod oci;

/// Why a plugin could not be fetched or published. Every variant names the reference or the
/// registry it is about.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference is not `registry/repository[:tag][@digest]`.
    #[error("invalid reference {reference:?}: {why}")]
    InvalidReference { reference: String, why: String },

    /// The sha256 pin is not `sha256:<64 hex digits>` (or the 64 hex digits alone).
    #[error("invalid sha256 pin {pin:?}: expected sha256:<64 hex digits>")]
    InvalidPin { pin: String },

    /// The `.dockerconfigjson` payload of a registry Secret cannot be used.
    #[error("invalid .dockerconfigjson: {why}")]
    InvalidDockerConfig { why: String },

    /// The registry could not be reached (connection refused, DNS, TLS, timeout).
    #[error("registry {registry} is unreachable: {message}")]
    Unreachable { registry: String, message: String },

    /// The registry refused the request (401/403): credentials missing, wrong, or lacking access.
    #[error("registry {registry} refused access to {reference} ({credentials}): {message}")]
    Unauthorized {
        registry: String,
        reference: String,
        credentials: &'static str,
        message: String,
    },

    /// The repository, tag or digest does not exist (404).
    #[error("{reference} not found: {message}")]
    NotFound { reference: String, message: String },

    /// The manifest, its config or its layer has a media type other than the wasm artifact's.
    #[error(
        "{reference} is not a WebAssembly plugin artifact: {what} media type is {found:?}, expected {expected:?}"
    )]
    WrongMediaType {
        reference: String,
        what: &'static str,
        found: String,
        expected: &'static str,
    },

    /// The artifact does not have exactly one layer.
    #[error(
        "{reference} is not a WebAssembly plugin artifact: it has {found} layers, expected exactly 1"
    )]
    WrongLayerCount { reference: String, found: usize },

    /// The layer is larger than the configured maximum.
    #[error(
        "{reference}: layer of {size} bytes is above the limit of {limit} bytes; refusing to download it"
    )]
    TooLarge {
        reference: String,
        size: u64,
        limit: u64,
    },

    /// The plugin's digest is not the pinned one (from any source: a registry, a ConfigMap, a
    /// file).
    #[error(
        "{source_name}: refusing the plugin: pinned digest is {expected}, the component's is {actual}{hint}"
    )]
    DigestMismatch {
        /// The source, as `oci <reference>`, `configMap ns/name[key]` or `file <path>`.
        source_name: String,
        expected: String,
        actual: String,
        hint: &'static str,
    },

    /// A gzip-compressed component (in a ConfigMap or a file) is corrupt, or inflates to more
    /// than the limit.
    #[error("{source_name}: refusing the plugin: the gzip-compressed component {why}")]
    Inflate {
        /// The source, as `configMap ns/name[key]` or `file <path>`.
        source_name: String,
        why: String,
    },

    /// The downloaded bytes do not hash to the digest the manifest declares.
    #[error(
        "{reference}: layer content is corrupt: declared {declared}, downloaded bytes hash to {actual}"
    )]
    Corrupt {
        reference: String,
        declared: String,
        actual: String,
    },

    /// The bytes to push are not a plugin this host can load.
    #[error("refusing to push to {reference}: {source}")]
    InvalidPlugin {
        reference: String,
        source: Box<windlass_contract::Error>,
    },

    /// A signing or verification key that cannot be used (not PEM, not ECDSA P-256).
    #[error("key {key}: {why}")]
    InvalidKey { key: String, why: String },

    /// Verification was asked for and the manifest has no signature at all.
    #[error(
        "{reference}: refusing manifest {digest}: it is not signed (no signature at {signature}); wanted a signature by {keys}"
    )]
    Unsigned {
        reference: String,
        digest: String,
        /// Where cosign's signature for the digest would be (`repository:sha256-<hex>.sig`).
        signature: String,
        /// The keys accepted, as `name (sha256:<fingerprint>)`, comma-separated.
        keys: String,
    },

    /// Verification was asked for and no signature of the manifest verifies with the keys.
    #[error("{reference}: refusing manifest {digest}: no signature verifies with {keys} ({why})")]
    SignatureInvalid {
        reference: String,
        digest: String,
        keys: String,
        /// Why each signature found was not accepted.
        why: String,
    },

    /// Any other answer of the registry (5xx, a protocol violation).
    #[error("registry {registry} failed for {reference}: {message}")]
    Registry {
        registry: String,
        reference: String,
        message: String,
    },
}

impl Error {
    /// A stable, one-word reason for metrics labels and condition reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidReference { .. } => "InvalidReference",
            Error::InvalidPin { .. } => "InvalidPin",
            Error::InvalidDockerConfig { .. } => "InvalidPullSecret",
            Error::Unreachable { .. } => "RegistryUnreachable",
            Error::Unauthorized { .. } => "RegistryUnauthorized",
            Error::NotFound { .. } => "NotFound",
            Error::WrongMediaType { .. } => "WrongMediaType",
            Error::WrongLayerCount { .. } => "WrongLayerCount",
            Error::TooLarge { .. } => "TooLarge",
            Error::DigestMismatch { .. } => "DigestMismatch",
            Error::Corrupt { .. } => "Corrupt",
            Error::Inflate { .. } => "InflateFailed",
            Error::InvalidPlugin { .. } => "InvalidPlugin",
            Error::InvalidKey { .. } => "InvalidKey",
            Error::Unsigned { .. } => "Unsigned",
            Error::SignatureInvalid { .. } => "SignatureInvalid",
            Error::Registry { .. } => "RegistryFailed",
        }
    }
}

/// Result of source operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Installs rustls's `ring` crypto provider as the process default. The registry client and
/// the Kubernetes client are built without one and both use this provider. Idempotent: a
/// provider already installed (by an earlier call or by someone else) is kept.
pub fn install_crypto_provider() {
    // Err means a provider is already installed, which is all this function promises.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A `sha256` pin, `sha256:<hex>` or the bare hex, normalised to lowercase `sha256:<hex>`.
/// Checked before anything is fetched, whatever the source.
///
/// # Errors
/// [`Error::InvalidPin`] for anything else.
pub fn parse_pin(pin: &str) -> Result<String> {
    let hex = pin.strip_prefix("sha256:").unwrap_or(pin);
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
    } else {
        Err(Error::InvalidPin {
            pin: pin.to_string(),
        })
    }
}
