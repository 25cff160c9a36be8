//! A component in a file on the host's filesystem (development only): no revision, no watch
//! — a new spec or a restart reads it again.

use crate::crd::FileSource;

/// `file PATH`.
pub fn describe(source: &FileSource) -> String {
    format!("file {}", source.path)
}

/// Nothing: a file is read when the spec changes.
pub fn watch(_: &FileSource) -> super::Watch {
    super::Watch::Nothing
}

/// The file's bytes.
///
/// # Errors
/// Why it cannot be read, for [`super::LoadError::Source`].
pub async fn fetch(source: &FileSource) -> Result<Vec<u8>, String> {
    tokio::fs::read(&source.path)
        .await
        .map_err(|e| e.to_string())
}
