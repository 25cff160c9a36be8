// {{name}}: a Windlass plugin. It reconciles a Greeting (deploy/crd.yaml): publishes
// `spec.message` in a ConfigMap `<name>-greeting` and reports it in the status.
//
// `./build.sh` runs the tests and builds `{{name}}.wasm`; `windlass plugin test {{name}}.wasm
// cases` checks the component against the recorded cases.

import * as windlass from "./windlass/windlass.js";

export const reconciler = windlass.plugin({
  info: {
    name: "{{name}}",
    version: "0.1.0",
    parents: ["example.windlass.dev/v1alpha1/Greeting"],
    children: ["v1/ConfigMap"],
  },

  reconcile(ctx) {
    const message = ctx.spec.message;
    if (typeof message !== "string" || message === "") {
      throw new windlass.InvalidParent("spec.message: must be a non-empty string");
    }
    const name = `${ctx.name}-greeting`;
    return ctx
      .output()
      .apply({ apiVersion: "v1", kind: "ConfigMap", metadata: { name }, data: { message } })
      .status("message", message)
      .condition("Greeted", true, "Published", `${name} holds the message`);
  },
});
