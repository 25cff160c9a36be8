// Unit tests of the plugin, natively (no WebAssembly): node --test
import assert from "node:assert/strict";
import { test } from "node:test";
import { InvalidParent } from "./windlass/windlass.js";
import { harness } from "./windlass/testing.js";
import { reconciler } from "./plugin.js";

const parent = (message) => ({
  apiVersion: "example.windlass.dev/v1alpha1",
  kind: "Greeting",
  metadata: { name: "hello", namespace: "demo" },
  spec: { message },
});

test("publishes the message in a ConfigMap", () => {
  const out = harness({ parent: parent("Hello") }).run(reconciler);
  assert.equal(out.find("v1/ConfigMap", "hello-greeting").data.message, "Hello");
  assert.deepEqual(out.statusFragment, { message: "Hello" });
  assert.deepEqual(out.conditions, [
    { kind: "Greeted", status: true, reason: "Published", message: "hello-greeting holds the message" },
  ]);
});

test("keeps what earlier plugins produced", () => {
  const earlier = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "hello-settings" }, data: {} };
  const out = harness({ parent: parent("Hello"), desired: [earlier] }).run(reconciler);
  assert.deepEqual(out.desired.map((o) => o.metadata.name), ["hello-settings", "hello-greeting"]);
});

test("refuses an empty message, naming the field", () => {
  assert.throws(
    () => harness({ parent: parent("") }).run(reconciler),
    (e) => e instanceof InvalidParent && e.message === "spec.message: must be a non-empty string",
  );
});

test("has nothing to clean up when the Greeting is deleted", () => {
  const out = harness({ parent: parent("Hello"), phase: "finalize" }).run(reconciler);
  assert.equal(out.isFinalized, true);
  assert.deepEqual(out.desired, []);
});
