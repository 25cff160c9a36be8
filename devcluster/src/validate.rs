//! What the real server rejects for built-in kinds, within the devcluster's scope: names,
//! required fields, and immutable fields (a StatefulSet's selector and volumeClaimTemplates…).

use crate::error::{ApiError, Cause, Result};
use crate::resources::ResourceType;
use serde_json::Value;

fn cause(reason: &str, field: &str, message: impl Into<String>) -> Cause {
    Cause {
        reason: reason.into(),
        field: field.into(),
        message: message.into(),
    }
}

fn required(field: &str) -> Cause {
    cause("FieldValueRequired", field, "Required value")
}

/// Whether `s` is a DNS-1123 subdomain (what most kinds require of names).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Checks a built-in object about to be stored; `old` is the stored object for an update.
///
/// # Errors
/// 422 listing every invalid field.
pub fn builtin(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Result<()> {
    let mut causes = Vec::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    } else if !is_dns_subdomain(name) && rt.kind != "Event" {
        causes.push(cause(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        ));
    }
    let spec = &obj["spec"];
    match rt.kind.as_str() {
        "StatefulSet" | "Deployment" => {
            if spec["selector"].is_null() {
                causes.push(required("spec.selector"));
            }
            if spec["template"].is_null() {
                causes.push(required("spec.template"));
            }
            if let Some(wanted) = spec["selector"]["matchLabels"].as_object() {
                let labels = &spec["template"]["metadata"]["labels"];
                if wanted.iter().any(|(k, v)| labels.get(k) != Some(v)) {
                    causes.push(cause(
                        "FieldValueInvalid",
                        "spec.template.metadata.labels",
                        "Invalid value: `selector` does not match template `labels`",
                    ));
                }
            }
            if let Some(old) = old {
                immutable_sts_deploy(rt, spec, &old["spec"], &mut causes);
            }
        }
        "Job" => {
            if spec["template"].is_null() {
                causes.push(required("spec.template"));
            }
            if let Some(old) = old
                && spec["template"] != old["spec"]["template"]
            {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec.template",
                    "Invalid value: field is immutable",
                ));
            }
        }
        "CronJob" => {
            if spec["schedule"].as_str().unwrap_or_default().is_empty() {
                causes.push(required("spec.schedule"));
            }
            if spec["jobTemplate"].is_null() {
                causes.push(required("spec.jobTemplate"));
            }
        }
        "Pod" if spec["containers"].as_array().is_none_or(Vec::is_empty) => {
            causes.push(required("spec.containers"));
        }
        "Service" => {
            // With more than one port, each needs a distinct name.
            let ports = spec["ports"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            if ports.len() > 1 {
                let mut seen = std::collections::HashSet::new();
                for (i, p) in ports.iter().enumerate() {
                    match p["name"].as_str().filter(|n| !n.is_empty()) {
                        None => causes.push(required(&format!("spec.ports[{i}].name"))),
                        Some(n) if !seen.insert(n) => causes.push(cause(
                            "FieldValueDuplicate",
                            &format!("spec.ports[{i}].name"),
                            format!("Duplicate value: \"{n}\""),
                        )),
                        Some(_) => {}
                    }
                }
            }
            if let Some(old) = old {
                let was = old["spec"]["clusterIP"].as_str().unwrap_or_default();
                let now = spec["clusterIP"].as_str().unwrap_or(was);
                if !was.is_empty() && was != now {
                    causes.push(cause(
                        "FieldValueInvalid",
                        "spec.clusterIP",
                        "Invalid value: field is immutable",
                    ));
                }
            }
        }
        "ConfigMap" | "Secret" => {
            if let Some(old) = old
                && old["immutable"] == Value::Bool(true)
                && (obj["data"] != old["data"] || obj["binaryData"] != old["binaryData"])
            {
                causes.push(cause(
                    "FieldValueForbidden",
                    "data",
                    "Forbidden: field is immutable when `immutable` is set",
                ));
            }
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&rt.kind, &rt.group, name, causes))
    }
}

fn immutable_sts_deploy(rt: &ResourceType, spec: &Value, old: &Value, causes: &mut Vec<Cause>) {
    if rt.kind == "StatefulSet" {
        let fixed = [
            "selector",
            "volumeClaimTemplates",
            "serviceName",
            "podManagementPolicy",
        ];
        if fixed.iter().any(|f| spec[*f] != old[*f]) {
            causes.push(cause(
                "FieldValueForbidden",
                "spec",
                "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    } else if spec["selector"] != old["selector"] {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.selector",
            "Invalid value: field is immutable",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;
    use serde_json::json;

    fn sts(claims: Value) -> Value {
        json!({"metadata": {"name": "db"}, "spec": {"selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}}, "volumeClaimTemplates": claims}})
    }

    #[test]
    fn changing_a_statefulsets_volume_claim_templates_is_forbidden() {
        let reg = Registry::default();
        let rt = reg.find("apps", "v1", "statefulsets").expect("served");
        assert!(builtin(&rt, &sts(json!([])), None).is_ok());
        let err = builtin(
            &rt,
            &sts(json!([{"metadata": {"name": "data"}}])),
            Some(&sts(json!([]))),
        )
        .expect_err("422");
        assert_eq!(err.code, 422);
        assert!(
            err.message.contains("updates to statefulset spec"),
            "{}",
            err.message
        );
    }

    #[test]
    fn names_must_be_dns_subdomains() {
        assert!(is_dns_subdomain("db-0.x"));
        assert!(!is_dns_subdomain("Db"));
        assert!(!is_dns_subdomain("-a"));
    }
}
