//! The SampleDB CustomResourceDefinition, for `windlass crds` and `windlass dev` (not for
//! plugins, which only read and write the types).

use serde_json::Value;

/// The SampleDB CRD (samples.windlass.dev/v1alpha1), generated from this crate's types
/// the way kube-derive generates schemas (structural, inlined, nullable options).
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct SampleDbSchema {
        spec: crate::SampleDbSpec,
        status: Option<crate::SampleDbStatus>,
    }
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube_core::schema::StructuralSchemaRewriter)
        .with_transform(kube_core::schema::OptionalEnum)
        .into_generator();
    let mut schema = serde_json::to_value(generator.into_root_schema_for::<SampleDbSchema>())
        .unwrap_or_default();
    if let Some(map) = schema.as_object_mut() {
        map.remove("title");
        // Conditions are an open list the host writes; other status fields come from plugins.
        map.insert(
            "description".into(),
            Value::String("A SampleDB database managed by Windlass plugins".into()),
        );
    }
    if let Some(status) = schema
        .pointer_mut("/properties/status/properties")
        .and_then(Value::as_object_mut)
    {
        status.insert(
            "conditions".into(),
            serde_json::json!({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}),
        );
        status.insert(
            "observedGeneration".into(),
            serde_json::json!({"type": "integer", "format": "int64"}),
        );
    }
    let column = |name: &str, type_: &str, path: &str| serde_json::json!({"name": name, "type": type_, "jsonPath": path});
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("sampledbs.{}", crate::GROUP)},
        "spec": {
            "group": crate::GROUP,
            "names": {
                "kind": crate::KIND, "plural": "sampledbs", "singular": "sampledb",
                "shortNames": ["sdb"], "categories": ["windlass"],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    // What runs, which a refused downgrade or an upgrade under way leaves
                    // apart from what is asked (`-o wide`).
                    column("Version", "string", ".status.currentVersion"),
                    serde_json::json!({"name": "Desired", "type": "string",
                        "jsonPath": ".spec.version", "priority": 1}),
                    column("Phase", "string", ".status.phase"),
                    column("Ready", "integer", ".status.readyReplicas"),
                    column("Primary", "string", ".status.primary"),
                    column("Age", "date", ".metadata.creationTimestamp"),
                ],
            }],
        },
    }))
    .expect("the SampleDB CRD is a valid CustomResourceDefinition")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampledb_crd_validates_replicas_version_and_schedule_and_has_printer_columns() {
        let crd = serde_json::to_value(crd()).unwrap();
        let version = &crd["spec"]["versions"][0];
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(
            spec["properties"]["replicas"]["minimum"].as_f64(),
            Some(1.0)
        );
        assert!(spec["properties"]["version"]["pattern"].is_string());
        assert!(spec["properties"]["backup"]["properties"]["schedule"]["pattern"].is_string());
        assert_eq!(spec["required"], serde_json::json!(["storage", "version"]));
        let enum_values = &spec["properties"]["deletionPolicy"]["enum"];
        assert_eq!(
            enum_values,
            &serde_json::json!(["Snapshot", "Retain", "Delete"])
        );
        assert_eq!(
            crd["spec"]["names"]["shortNames"],
            serde_json::json!(["sdb"])
        );
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            ["Version", "Desired", "Phase", "Ready", "Primary", "Age"]
        );
        let printer = &version["additionalPrinterColumns"];
        assert_eq!(printer[0]["jsonPath"], ".status.currentVersion");
        assert_eq!(printer[1]["jsonPath"], ".spec.version");
        assert_eq!(printer[1]["priority"], 1);
        assert!(
            !crd.to_string().contains("$ref"),
            "the schema must be structural (inlined)"
        );
    }
}
