"""{{name}}: a Windlass plugin. It reconciles a Greeting (deploy/crd.yaml): publishes
`spec.message` in a ConfigMap `<name>-greeting` and reports it in the status.

The logic works on plain dicts; the SDK (`windlass/`) does the JSON and the WIT contract.
`./build.sh` runs the tests (test_plugin.py) and builds `{{name}}.wasm`;
`windlass plugin test {{name}}.wasm cases` checks the component against the recorded cases.
"""

import windlass


class Greeter(windlass.Plugin):
    def info(self):
        return windlass.Info(
            "{{name}}",
            "0.1.0",
            parents=["example.windlass.dev/v1alpha1/Greeting"],
            children=["v1/ConfigMap"],
        )

    def reconcile(self, ctx):
        message = ctx.spec.get("message")
        if not isinstance(message, str) or not message:
            raise windlass.InvalidParent("spec.message: must be a non-empty string")
        name = f"{ctx.name}-greeting"
        out = ctx.output()  # what earlier plugins of the pipeline produced, passed on
        out.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"message": message},
            }
        )
        out.status("message", message)
        out.condition("Greeted", True, "Published", f"{name} holds the message")
        return out

    # finalize: the default (nothing to clean up; the desired set unchanged, finalized).
