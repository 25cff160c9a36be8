// Unit tests of the conventions: node --test
import assert from "node:assert/strict";
import { test } from "node:test";
import { InvalidConfig, InvalidParent } from "../../guest-sdk/js/windlass.js";
import {
  DEFAULT_RESOURCES,
  PART_OF,
  VERSION,
  applyConventions,
  parseConfig,
} from "./transform.js";

const parent = { metadata: { name: "orders" }, spec: { version: "16.4" } };
const selector = { "app.kubernetes.io/instance": "orders", "app.kubernetes.io/name": "sampledb" };

function statefulSet(containers = [{ name: "db", image: "sampledb:16.4" }]) {
  return {
    apiVersion: "apps/v1",
    kind: "StatefulSet",
    metadata: { name: "orders", labels: { ...selector } },
    spec: {
      selector: { matchLabels: { ...selector } },
      template: { metadata: { labels: { ...selector } }, spec: { containers } },
      volumeClaimTemplates: [{ metadata: { name: "data", labels: { ...selector } }, spec: {} }],
    },
  };
}

const podPatch = () => ({
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name: "orders-0", labels: { "samples.windlass.dev/role": "primary" } },
});

const run = (objects, config = {}) => applyConventions(parent, objects, config);

test("labels top-level metadata with part-of and version", () => {
  const [svc] = run([{ apiVersion: "v1", kind: "Service", metadata: { name: "orders" } }]);
  assert.deepEqual(svc.metadata.labels, { [PART_OF]: "sampledb", [VERSION]: "16.4" });
});

test("keeps labels that are set already", () => {
  const [cm] = run([
    { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c", labels: { [PART_OF]: "x", [VERSION]: "1" } } },
  ]);
  assert.deepEqual(cm.metadata.labels, { [PART_OF]: "x", [VERSION]: "1" });
});

test("pod templates get part-of and default resources but no version", () => {
  const [sts] = run([statefulSet()]);
  assert.deepEqual(sts.spec.template.metadata.labels, { ...selector, [PART_OF]: "sampledb" });
  assert.deepEqual(sts.spec.template.spec.containers[0].resources, DEFAULT_RESOURCES);
  assert.equal(sts.metadata.labels[VERSION], "16.4");
});

test("never touches the StatefulSet's selector or volume claim templates", () => {
  const input = statefulSet();
  const [sts] = run([input]);
  assert.deepEqual(sts.spec.selector, input.spec.selector);
  assert.deepEqual(sts.spec.volumeClaimTemplates, input.spec.volumeClaimTemplates);
});

test("keeps explicit resources and fills init containers", () => {
  const explicit = { requests: { cpu: "2" } };
  const input = statefulSet([{ name: "db", resources: explicit }]);
  input.spec.template.spec.initContainers = [{ name: "init" }];
  const [sts] = run([input]);
  assert.deepEqual(sts.spec.template.spec.containers[0].resources, explicit);
  assert.deepEqual(sts.spec.template.spec.initContainers[0].resources, DEFAULT_RESOURCES);
});

test("jobs and cronjobs get the template conventions", () => {
  const template = () => ({ spec: { containers: [{ name: "backup" }] } });
  const [job, cron] = run([
    { apiVersion: "batch/v1", kind: "Job", metadata: { name: "j" }, spec: { template: template() } },
    {
      apiVersion: "batch/v1",
      kind: "CronJob",
      metadata: { name: "c" },
      spec: { jobTemplate: { spec: { template: template() } } },
    },
  ]);
  for (const t of [job.spec.template, cron.spec.jobTemplate.spec.template]) {
    assert.deepEqual(t.metadata.labels, { [PART_OF]: "sampledb" });
    assert.deepEqual(t.spec.containers[0].resources, DEFAULT_RESOURCES);
  }
});

test("resources come from config", () => {
  const resources = { requests: { cpu: "1", memory: "1Gi" } };
  const [sts] = run([statefulSet()], { resources });
  assert.deepEqual(sts.spec.template.spec.containers[0].resources, resources);
});

test("pods pass through as they are", () => {
  const pod = podPatch();
  const out = applyConventions(parent, [pod], {});
  assert.equal(out[0], pod);
  assert.deepEqual(pod, podPatch());
});

test("adds a PodDisruptionBudget for the StatefulSet", () => {
  const out = run([statefulSet(), podPatch()]);
  assert.equal(out.length, 3);
  const pdb = out[2];
  assert.equal(pdb.apiVersion, "policy/v1");
  assert.equal(pdb.kind, "PodDisruptionBudget");
  assert.equal(pdb.metadata.name, "orders");
  assert.deepEqual(pdb.spec, { maxUnavailable: 1, selector: { matchLabels: selector } });
  assert.deepEqual(pdb.metadata.labels, { ...selector, [PART_OF]: "sampledb", [VERSION]: "16.4" });
});

test("no PodDisruptionBudget without the StatefulSet, nor a second one", () => {
  assert.equal(run([{ apiVersion: "v1", kind: "Service", metadata: { name: "orders" } }]).length, 1);
  const pdb = { apiVersion: "policy/v1", kind: "PodDisruptionBudget", metadata: { name: "orders" }, spec: {} };
  assert.equal(run([statefulSet(), pdb]).length, 2);
});

test("does not change its input", () => {
  const input = [statefulSet()];
  applyConventions(parent, input, {});
  assert.deepEqual(input, [statefulSet()]);
});

test("refuses unknown config keys, naming them", () => {
  assert.throws(
    () => parseConfig({ resources: {}, replicas: 3 }),
    (e) => e instanceof InvalidConfig && e.message === "unknown field `replicas`, expected `resources`",
  );
  assert.throws(() => parseConfig({ resources: { request: {} } }), /resources.request: unknown field/);
});

test("refuses a parent without a name", () => {
  assert.throws(
    () => applyConventions({ metadata: {} }, [], {}),
    (e) => e instanceof InvalidParent && e.message === "metadata.name: missing",
  );
});
