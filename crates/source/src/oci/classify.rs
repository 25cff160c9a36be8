//! oci-client's errors, turned into [`Error`] variants a user can act on.

use oci_client::{
    Reference,
    errors::{OciDistributionError, OciErrorCode},
    manifest::OCI_IMAGE_MEDIA_TYPE,
};

use super::Client;
use crate::Error;

impl Client {
    /// Turns the client's error into one a user can act on.
    pub(super) fn classify(&self, r: &Reference, e: OciDistributionError) -> Error {
        let reference = r.whole();
        let registry = r.registry().to_string();
        let unauthorized = |message: String| Error::Unauthorized {
            registry: registry.clone(),
            reference: reference.clone(),
            credentials: match self.options.auth {
                Some(_) => "with the credentials given",
                None => "no credentials given",
            },
            message,
        };
        let not_found = |message: String| Error::NotFound {
            reference: reference.clone(),
            message,
        };
        match e {
            OciDistributionError::RequestError(e) if e.status().is_none() => Error::Unreachable {
                registry,
                message: error_chain(&e),
            },
            OciDistributionError::IoError(e) => Error::Unreachable {
                registry,
                message: error_chain(&e),
            },
            OciDistributionError::UnauthorizedError { .. } => {
                unauthorized("401 Unauthorized".into())
            }
            OciDistributionError::AuthenticationFailure(m) => unauthorized(m),
            OciDistributionError::ServerError {
                code: 401 | 403,
                message,
                ..
            } => unauthorized(message),
            OciDistributionError::ServerError {
                code: 404, message, ..
            } => not_found(message),
            OciDistributionError::ImageManifestNotFoundError(m) => not_found(m),
            OciDistributionError::RegistryError { envelope, .. } => {
                let message = envelope.to_string();
                match envelope.errors.first().map(|e| &e.code) {
                    Some(OciErrorCode::Unauthorized | OciErrorCode::Denied) => {
                        unauthorized(message)
                    }
                    Some(
                        OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::NotFound
                        | OciErrorCode::BlobUnknown,
                    ) => not_found(message),
                    _ => Error::Registry {
                        registry,
                        reference,
                        message,
                    },
                }
            }
            OciDistributionError::UnsupportedMediaTypeError(found) => Error::WrongMediaType {
                reference,
                what: "manifest",
                found,
                expected: OCI_IMAGE_MEDIA_TYPE,
            },
            other => Error::Registry {
                registry,
                reference,
                message: error_chain(&other),
            },
        }
    }
}

/// An error and its sources, `: `-separated (reqwest hides the cause in its sources).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
