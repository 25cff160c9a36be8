// Shared by guest-children and guest-children-v2, which differ only in GENERATION: a plugin
// whose new version visibly changes its children, for hot-swap tests.
use windlass_sdk::{Context, Info, Output, Plugin, Result, json};

struct Children;

windlass_sdk::export!(Children);

#[derive(serde::Deserialize)]
struct Spec {
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    value: String,
}

impl Plugin for Children {
    fn info() -> Info {
        Info::new("guest-children", GENERATION)
            .parent("example.com/v1/Thing")
            .child_kind("v1/ConfigMap")
            .finalizes()
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let spec: Spec = ctx.spec()?;
        let mut out = ctx.output();
        for name in &spec.names {
            out.apply(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{}-{name}", ctx.name())},
                "data": {"version": GENERATION, "value": spec.value},
            }))?;
        }
        out.status("count", spec.names.len());
        out.status("version", GENERATION);
        out.condition("ChildrenReady", true, "Applied", format!("{} children", spec.names.len()));
        Ok(out)
    }

    /// Writes a final ConfigMap, and reports finalized once it has been observed.
    fn finalize(ctx: &Context) -> Result<Output> {
        let mut out = ctx.output();
        let final_name = format!("{}-final", ctx.name());
        let seen = ctx
            .observed_json("v1/ConfigMap")
            .any(|o| o.pointer("/metadata/name").and_then(|n| n.as_str()) == Some(final_name.as_str()));
        if seen {
            out.finalized(true);
            out.event("Finalized", format!("final snapshot {final_name} taken"));
        } else {
            out.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": final_name}, "data": {"final": "true"}}))?;
            out.requeue_after(std::time::Duration::from_secs(1));
        }
        Ok(out)
    }
}
