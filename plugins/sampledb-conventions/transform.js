// The SampleDB conventions as a pure function over plain JSON values: nothing here knows about
// WebAssembly or the WIT contract (the SDK owns both), so `node --test` runs it as is.

import { InvalidConfig, InvalidParent } from "../../guest-sdk/js/windlass.js";

export const PART_OF = "app.kubernetes.io/part-of";
export const VERSION = "app.kubernetes.io/version";
export const PART_OF_VALUE = "sampledb";

/** Resources given to containers that declare none, unless the config says otherwise. */
export const DEFAULT_RESOURCES = Object.freeze({
  requests: { cpu: "100m", memory: "128Mi" },
  limits: { memory: "512Mi" },
});

const CONFIG_KEYS = ["resources"];
const RESOURCES_KEYS = ["requests", "limits", "claims"];

/** A deep copy of a JSON value (QuickJS has no structuredClone). */
const clone = (v) => JSON.parse(JSON.stringify(v));

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/** "expected `a`" or "expected one of `a`, `b`", as serde says it in the Rust plugins. */
function expected(keys) {
  const quoted = keys.map((k) => `\`${k}\``);
  return quoted.length === 1 ? `expected ${quoted[0]}` : `expected one of ${quoted.join(", ")}`;
}

/** The plugin's config (a JSON object): `{ resources }`; unknown keys are refused. */
export function parseConfig(config) {
  if (!isObject(config)) {
    throw new InvalidConfig("config: must be an object");
  }
  for (const key of Object.keys(config)) {
    if (!CONFIG_KEYS.includes(key)) {
      throw new InvalidConfig(`unknown field \`${key}\`, ${expected(CONFIG_KEYS)}`);
    }
  }
  const resources = config.resources ?? DEFAULT_RESOURCES;
  if (!isObject(resources)) {
    throw new InvalidConfig("resources: must be an object");
  }
  for (const key of Object.keys(resources)) {
    if (!RESOURCES_KEYS.includes(key)) {
      throw new InvalidConfig(`resources.${key}: unknown field`);
    }
  }
  return { resources };
}

/** Sets `labels[key] = value` unless the key is set already. */
function addLabel(metadata, key, value) {
  metadata.labels ??= {};
  if (!(key in metadata.labels)) {
    metadata.labels[key] = value;
  }
}

/** The pod templates an object carries, by kind. */
function podTemplates(obj) {
  const { apiVersion, kind } = obj;
  if (
    (apiVersion === "apps/v1" && kind === "StatefulSet") ||
    (apiVersion === "batch/v1" && kind === "Job")
  ) {
    return obj.spec?.template ? [obj.spec.template] : [];
  }
  if (apiVersion === "batch/v1" && kind === "CronJob") {
    const template = obj.spec?.jobTemplate?.spec?.template;
    return template ? [template] : [];
  }
  return [];
}

/** Labels a pod template as part of SampleDB (not with the version: an upgrade must not roll
 * Pods for a label) and gives its containers default resources. */
function conventionalTemplate(template, resources) {
  template.metadata ??= {};
  addLabel(template.metadata, PART_OF, PART_OF_VALUE);
  const spec = template.spec ?? {};
  for (const container of [...(spec.containers ?? []), ...(spec.initContainers ?? [])]) {
    if (container.resources == null) {
      container.resources = clone(resources);
    }
  }
}

/** One desired object with the conventions applied (a new object; the input is not changed). */
export function conventional(obj, version, resources) {
  const out = clone(obj);
  out.metadata ??= {};
  addLabel(out.metadata, PART_OF, PART_OF_VALUE);
  if (version !== undefined) {
    addLabel(out.metadata, VERSION, version);
  }
  for (const template of podTemplates(out)) {
    conventionalTemplate(template, resources);
  }
  return out;
}

/** A PodDisruptionBudget letting at most one database Pod go at a time. */
export function disruptionBudget(name, statefulSet) {
  const matchLabels = clone(statefulSet.spec?.selector?.matchLabels ?? {});
  return {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: { name, labels: clone(matchLabels) },
    spec: { maxUnavailable: 1, selector: { matchLabels } },
  };
}

const isPod = (obj) => obj.apiVersion === "v1" && obj.kind === "Pod";
const isNamed = (obj, apiVersion, kind, name) =>
  obj.apiVersion === apiVersion && obj.kind === kind && obj.metadata?.name === name;

/** The parent's name, or an invalid-parent error. */
export function parentName(parent) {
  const name = parent?.metadata?.name;
  if (typeof name !== "string" || name === "") {
    throw new InvalidParent("metadata.name: missing");
  }
  return name;
}

/**
 * Applies the conventions to the desired set.
 *
 * `parent` and `config` are JSON values; `desired` is the list of desired objects. Returns the
 * new list: Pods (label patches of Pods the StatefulSet owns) are passed on as they are (the same
 * objects, so the SDK sends them back byte for byte), every other object is a copy with the
 * labels and default resources, and a PodDisruptionBudget `<name>` is added when the StatefulSet
 * `<name>` is desired.
 * @throws {InvalidParent} for a parent without a name.
 * @throws {InvalidConfig} for a config with unknown keys.
 */
export function applyConventions(parent, desired, config) {
  const name = parentName(parent);
  const { resources } = parseConfig(config);
  const rawVersion = parent.spec?.version;
  const version = rawVersion == null ? undefined : String(rawVersion);

  const statefulSet = desired.find((o) => isNamed(o, "apps/v1", "StatefulSet", name));
  const hasBudget = desired.some((o) => isNamed(o, "policy/v1", "PodDisruptionBudget", name));
  const out = desired.map((obj) => (isPod(obj) ? obj : conventional(obj, version, resources)));
  if (statefulSet && !hasBudget) {
    out.push(conventional(disruptionBudget(name, statefulSet), version, resources));
  }
  return out;
}
