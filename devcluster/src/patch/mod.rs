//! Patches: JSON patch (RFC 6902) and JSON merge patch (RFC 7386) through the `json-patch`
//! crate, strategic merge patch and server-side apply written here.

pub mod apply;
pub mod fields;
pub mod lists;
pub mod strategic;

use crate::error::{ApiError, Result};
use serde_json::Value;

/// The patch types the server accepts, by `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply; JSON is YAML).
    Apply,
}

impl PatchType {
    /// The type for a `Content-Type` header.
    ///
    /// # Errors
    /// 415 for anything else.
    pub fn from_content_type(ct: &str) -> Result<Self> {
        let base = ct.split(';').next().unwrap_or_default().trim();
        match base {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(Self::Apply),
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
}

/// Applies a JSON, merge or strategic patch (not apply) to a copy of `current`.
///
/// # Errors
/// 400 when the patch does not parse; 422 when a JSON patch operation fails (a `test`, a
/// missing path), as the real server answers.
pub fn patch_object(current: &Value, kind: PatchType, body: &[u8], builtin: bool) -> Result<Value> {
    let mut target = current.clone();
    match kind {
        PatchType::Json => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut target, &p).map_err(|e| ApiError {
                code: 422,
                reason: "Invalid",
                message: format!(
                    "the server rejected our request due to an error in our request: {e}"
                ),
                details: None,
                retry_after: None,
            })?;
        }
        PatchType::Merge | PatchType::Strategic => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid merge patch: {e}")))?;
            if !p.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            if kind == PatchType::Strategic {
                if !builtin {
                    return Err(ApiError::unsupported_media_type(
                        "application/strategic-merge-patch+json (strategic merge patch is not supported for custom resources)",
                    ));
                }
                strategic::patch(&mut target, &p);
            } else {
                json_patch::merge(&mut target, &p);
            }
        }
        PatchType::Apply => return Err(ApiError::bad_request("apply is not a plain patch")),
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failed_json_patch_test_is_unprocessable() {
        let cur = json!({"metadata": {"finalizers": ["a"]}});
        let body = br#"[{"op":"test","path":"/metadata/finalizers/0","value":"b"},{"op":"remove","path":"/metadata/finalizers/0"}]"#;
        assert_eq!(
            patch_object(&cur, PatchType::Json, body, true)
                .expect_err("test fails")
                .code,
            422
        );
    }

    #[test]
    fn strategic_merge_patch_is_refused_for_custom_resources() {
        let err =
            patch_object(&json!({}), PatchType::Strategic, b"{}", false).expect_err("refused");
        assert_eq!(err.code, 415);
    }
}
