//! {{name}}: a Windlass plugin. It reconciles a Greeting (deploy/crd.yaml): publishes
//! `spec.message` in a ConfigMap `<name>-greeting` and reports it in the status.
//!
//! `./build.sh` runs the tests and builds `{{name}}.wasm`; `windlass plugin test {{name}}.wasm
//! cases` checks the component against the recorded cases.

use serde::Deserialize;
use windlass_sdk::{Context, Error, Info, Output, Plugin, Result, json};

/// The plugin.
pub struct Greeter;

/// The Greeting's spec.
#[derive(Deserialize)]
struct Spec {
    #[serde(default)]
    message: String,
}

windlass_sdk::export!(Greeter);

impl Plugin for Greeter {
    fn info() -> Info {
        Info::new("{{name}}", "0.1.0")
            .parent("example.windlass.dev/v1alpha1/Greeting")
            .child_kind("v1/ConfigMap")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let spec: Spec = ctx.spec()?;
        if spec.message.is_empty() {
            return Err(Error::InvalidParent(
                "spec.message: must be a non-empty string".into(),
            ));
        }
        let name = format!("{}-greeting", ctx.name());
        let mut out = ctx.output();
        out.apply(&json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name},
            "data": {"message": spec.message},
        }))?;
        out.status("message", &spec.message);
        out.condition(
            "Greeted",
            true,
            "Published",
            format!("{name} holds the message"),
        );
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::Greeter;
    use windlass_sdk::{Error, testing::Harness};

    const PARENT: &str = "apiVersion: example.windlass.dev/v1alpha1\nkind: Greeting\n\
        metadata: {name: hello, namespace: demo}\nspec: {message: Hello}";

    #[test]
    fn publishes_the_message_in_a_config_map() {
        let out = Harness::from_yaml(PARENT).run::<Greeter>().unwrap();
        let cm = out.find("v1/ConfigMap", "hello-greeting").expect("the ConfigMap");
        assert_eq!(cm["data"]["message"], "Hello");
        assert_eq!(out.status_fragment()["message"], "Hello");
        let greeted = out.condition_of("Greeted").expect("the condition");
        assert!(greeted.status);
        assert_eq!(greeted.reason, "Published");
    }

    #[test]
    fn refuses_an_empty_message_naming_the_field() {
        let parent = PARENT.replace("{message: Hello}", "{message: \"\"}");
        let err = Harness::from_yaml(&parent).run::<Greeter>().unwrap_err();
        assert!(
            matches!(&err, Error::InvalidParent(m) if m.starts_with("spec.message")),
            "{err}"
        );
    }
}
