//! API errors: what the server answers, shaped as `metav1.Status` objects.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One cause inside a `Status`' details (a field error for a 422, a conflicting manager for
/// a server-side apply 409).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// The machine word: `FieldValueInvalid`, `FieldValueRequired`, `FieldManagerConflict`…
    pub reason: String,
    /// What a person reads.
    pub message: String,
    /// The field path (`spec.replicas`), empty when none.
    pub field: String,
}

/// An error answered by the API server, with the HTTP code and the `Status` reason the real
/// server uses for it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason`: `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`…
    pub reason: &'static str,
    /// Human-readable message, in the real server's wording where it matters to clients.
    pub message: String,
    /// `details` (name, group, kind, causes), when the real server sends them.
    pub details: Option<Value>,
    /// Seconds to put in `Retry-After` (429s).
    pub retry_after: Option<u64>,
}

/// `Result` with [`ApiError`].
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 404: `<resource> "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified(group, resource);
        let mut e = Self::new(404, "NotFound", format!("{qualified} \"{name}\" not found"));
        e.details = Some(json!({"name": name, "group": group, "kind": resource}));
        e
    }

    /// 404 for a path nothing serves.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409: the object exists already.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualified(group, resource);
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{qualified} \"{name}\" already exists"),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": resource}));
        e
    }

    /// 409: a stale resourceVersion or a failed precondition.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let qualified = qualified(group, resource);
        let mut e = Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}"),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": resource}));
        e
    }

    /// 409 from server-side apply: fields owned by other managers would change.
    pub fn apply_conflicts(causes: Vec<Cause>) -> Self {
        let list: Vec<String> = causes.iter().map(|c| format!("- {}", c.message)).collect();
        let message = if causes.len() == 1 {
            format!("Apply failed with 1 conflict: {}", causes[0].message)
        } else {
            format!(
                "Apply failed with {} conflicts: {}",
                causes.len(),
                list.join("\n")
            )
        };
        let mut e = Self::new(409, "Conflict", message);
        e.details = Some(json!({ "causes": causes_json(&causes) }));
        e
    }

    /// 422: the object is invalid; each cause names a field.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let listed: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let message = if listed.len() == 1 {
            format!("{qualified} \"{name}\" is invalid: {}", listed[0])
        } else {
            format!("{qualified} \"{name}\" is invalid: [{}]", listed.join(", "))
        };
        let mut e = Self::new(422, "Invalid", message);
        e.details = Some(
            json!({"name": name, "group": group, "kind": kind, "causes": causes_json(&causes)}),
        );
        e
    }

    /// 400 with a message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405: the verb is not supported here.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 415: a patch content type the server does not know.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type})"
            ),
        )
    }

    /// 410: the requested resourceVersion is older than the kept history.
    pub fn gone(rv: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {rv}"))
    }

    /// 403: forbidden (e.g. creating in a terminating namespace).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 500: an injected or internal error.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 504, as kube-apiserver answers a request that ran past its request timeout.
    pub fn timeout() -> Self {
        Self::new(
            504,
            "Timeout",
            "Timeout: request did not complete within the allotted timeout",
        )
    }

    /// 429 with `Retry-After`.
    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        );
        e.retry_after = Some(retry_after);
        e.details = Some(json!({"retryAfterSeconds": retry_after}));
        e
    }

    /// The `metav1.Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn causes_json(causes: &[Cause]) -> Vec<Value> {
    causes
        .iter()
        .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
        .collect()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.status().to_string();
        let mut builder = Response::builder()
            .status(code)
            .header("content-type", "application/json");
        if let Some(secs) = self.retry_after {
            builder = builder.header("retry-after", secs.to_string());
        }
        builder
            .body(axum::body::Body::from(body))
            .unwrap_or_else(|_| code.into_response())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_status_names_the_qualified_resource() {
        let s = ApiError::not_found("apps", "statefulsets", "db").status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "statefulsets.apps \"db\" not found");
    }

    #[test]
    fn invalid_status_lists_every_field_cause() {
        let causes = vec![
            Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "spec.a".into(),
            },
            Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value".into(),
                field: "spec.b".into(),
            },
        ];
        let s = ApiError::invalid("Widget", "x.dev", "w", causes).status();
        assert_eq!(s["code"], 422);
        assert!(
            s["message"]
                .as_str()
                .unwrap_or_default()
                .contains("spec.a: Required value, spec.b")
        );
        assert_eq!(s["details"]["causes"][1]["field"], "spec.b");
    }
}
