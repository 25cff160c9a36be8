// Write Windlass plugins (Kubernetes reconcile logic as WebAssembly components) in JavaScript.
//
//   import * as windlass from "./windlass/windlass.js";
//
//   export const reconciler = windlass.plugin({
//     info: { name: "greeter", version: "0.1.0", parents: ["example.com/v1/Greeting"],
//             children: ["v1/ConfigMap"] },
//     reconcile(ctx) {
//       const out = ctx.output();
//       out.apply({ apiVersion: "v1", kind: "ConfigMap",
//                   metadata: { name: `${ctx.name}-greeting` }, data: { greeting: ctx.spec.greeting } });
//       return out.status("published", true);
//     },
//   });
//
// The SDK owns the `windlass:plugin` WIT world: it parses the JSON the host sends, hands the
// plugin plain objects (a Context), and turns the Output, or an error thrown, into the WIT
// response, or the WIT `plugin-error`. Objects cross the boundary as JSON text, one object each.
//
// # Why no WIT import here
// This module imports nothing, so `node --test` loads it as it is. The `log` import lives in
// component.js, which only the component build loads (componentize.sh puts it in front of the
// plugin); without it, log lines go to stderr.
//
// # Guarantees
// - An object of the desired set the plugin leaves unchanged goes back to the host byte for byte
//   as it came, even when JavaScript numbers could not hold it exactly (integers beyond 2^53).
// - Whatever a plugin throws becomes a `plugin-error`: InvalidParent, InvalidConfig and Failed
//   map to their WIT cases, anything else to `failed` with its message.

/** Why a plugin refused to produce an output; `tag` is the WIT `plugin-error` case. */
export class PluginError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The parent's spec cannot be acted on; the message names the field. */
export class InvalidParent extends PluginError {
  get tag() {
    return "invalid-parent";
  }
}

/** The plugin's config cannot be used; the message names the key. */
export class InvalidConfig extends PluginError {
  get tag() {
    return "invalid-config";
  }
}

/** Anything else; the host retries with backoff. */
export class Failed extends PluginError {
  get tag() {
    return "failed";
  }
}

// ---------------------------------------------------------------------------------------------
// Logging

let hostLog = null;

/**
 * Routes `log` to the host's `windlass:plugin/log` import. component.js calls it; plugins never
 * need to.
 */
export function bindHostLog(log) {
  hostLog = log;
}

function write(level, message) {
  const text = String(message);
  if (hostLog !== null) {
    hostLog.log(level, text);
  } else if (typeof console !== "undefined") {
    // Natively (tests). QuickJS in a component has no console: there hostLog is bound.
    console.error(`[${level}] ${text}`);
  }
}

/** Lines into the host's log, tagged with the plugin's name; natively, to stderr. */
export const log = Object.freeze({
  debug: (message) => write("debug", message),
  info: (message) => write("info", message),
  warn: (message) => write("warn", message),
  error: (message) => write("error", message),
});

// ---------------------------------------------------------------------------------------------
// Context and Output

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/** True when `obj` is of `kind` (`group/version/Kind`, `v1/Kind` for core). */
function hasKind(obj, kind) {
  return isObject(obj) && `${obj.apiVersion}/${obj.kind}` === kind;
}

const isNamed = (obj, kind, name) => hasKind(obj, kind) && obj.metadata?.name === name;

/** Everything the host gave a plugin for one run, as plain objects. */
export class Context {
  /**
   * A context from already parsed values; plugins get theirs from the SDK (or from
   * testing.js's harness).
   */
  constructor({ phase = "reconcile", parent, observed = [], desired = [], config = {}, now = "" }) {
    /** `"reconcile"` or `"finalize"`. */
    this.phase = phase;
    /** The parent custom resource, with metadata, spec and status as the host last read them. */
    this.parent = parent;
    /** Objects the host observed: the parent's children and the kinds declared in `reads`. */
    this.observed = observed;
    /** The desired set the plugins before this one produced. */
    this.desired = desired;
    /** This plugin's config (`{}` when none). */
    this.config = config;
    /** The time of the run (RFC 3339), given by the host so that runs are reproducible. */
    this.now = now;
  }

  /** The parent's `metadata.name`. */
  get name() {
    return this.parent?.metadata?.name ?? "";
  }

  /** The parent's namespace; undefined for a cluster-scoped parent. */
  get namespace() {
    return this.parent?.metadata?.namespace ?? undefined;
  }

  /** The parent's `metadata.uid`. */
  get uid() {
    return this.parent?.metadata?.uid ?? "";
  }

  /** The parent's `metadata.generation` (0 when absent). */
  get generation() {
    return this.parent?.metadata?.generation ?? 0;
  }

  /** The parent's `spec` (`{}` when absent). */
  get spec() {
    return this.parent?.spec ?? {};
  }

  /** The parent's current `status` (`{}` when absent). */
  get status() {
    return this.parent?.status ?? {};
  }

  /** Observed objects of one kind (`group/version/Kind`). */
  observedOf(kind) {
    return this.observed.filter((o) => hasKind(o, kind));
  }

  /** The observed object of `kind` with this name, or undefined. */
  findObserved(kind, name) {
    return this.observed.find((o) => isNamed(o, kind, name));
  }

  /**
   * An output that starts from the earlier plugins' desired set, ready to add to. The array is
   * the output's own; the objects in it are those of `ctx.desired` (edit copies to keep them).
   */
  output() {
    return new Output([...this.desired]);
  }
}

/** The seconds a requeue delay stands for: a number of seconds, or a duration object. */
function requeueSeconds(delay) {
  if (typeof delay === "number") {
    if (!(delay >= 0)) {
      throw new TypeError(`requeueAfter: not a number of seconds: ${delay}`);
    }
    return delay;
  }
  const millis = { hours: 3_600_000, minutes: 60_000, seconds: 1000, milliseconds: 1 };
  const plain =
    delay !== null && typeof delay === "object" && Object.getPrototypeOf(delay) === Object.prototype;
  if (!plain || Object.keys(delay).length === 0) {
    throw new TypeError(`requeueAfter: not a number of seconds nor a duration such as { minutes: 5 }: ${delay}`);
  }
  let ms = 0;
  for (const [unit, value] of Object.entries(delay)) {
    if (!Object.hasOwn(millis, unit)) {
      throw new TypeError(`requeueAfter: unknown unit ${JSON.stringify(unit)} (use hours, minutes, seconds, milliseconds)`);
    }
    if (typeof value !== "number" || !(value >= 0)) {
      throw new TypeError(`requeueAfter: ${unit} is not a non-negative number: ${value}`);
    }
    ms += value * millis[unit];
  }
  // Whole milliseconds first, so that { minutes: 0.1 } is 6 s, not 6.000000000000001.
  return Math.round(ms) / 1000;
}

/** What a plugin returns: the whole desired set and what to report on the parent. */
export class Output {
  #status = {};
  #conditions = [];
  #events = [];
  #requeueAfterSecs = null;
  #finalized = false;

  /** An output holding `desired` (usually via `ctx.output()`). */
  constructor(desired = []) {
    /** The whole desired set after this plugin: add, edit or remove objects freely. */
    this.desired = desired;
  }

  /**
   * Adds an object to the desired set, replacing the one of the same `apiVersion/kind` and name.
   * The host sets namespace, owner reference and labels.
   * @throws {Failed} when the object lacks apiVersion, kind or metadata.name.
   */
  apply(obj) {
    const { apiVersion, kind } = obj ?? {};
    const name = obj?.metadata?.name;
    if (typeof apiVersion !== "string" || typeof kind !== "string" || typeof name !== "string") {
      const text = JSON.stringify(obj) ?? String(obj);
      throw new Failed(`a child needs apiVersion, kind and metadata.name: ${text.slice(0, 200)}`);
    }
    const at = this.desired.findIndex((o) => isNamed(o, `${apiVersion}/${kind}`, name));
    if (at === -1) {
      this.desired.push(obj);
    } else {
      this.desired[at] = obj;
    }
    return this;
  }

  /** Removes the object of `kind` (`group/version/Kind`) and name; returns it, or undefined. */
  remove(kind, name) {
    const at = this.desired.findIndex((o) => isNamed(o, kind, name));
    return at === -1 ? undefined : this.desired.splice(at, 1)[0];
  }

  /** The desired object of `kind` (`group/version/Kind`) and name, or undefined. */
  find(kind, name) {
    return this.desired.find((o) => isNamed(o, kind, name));
  }

  /** Sets a top-level field of the status fragment merged into the parent's `.status`. */
  status(key, value) {
    this.#status[key] = value;
    return this;
  }

  /** Sets the condition `kind` (UpperCamelCase), replacing an earlier one of that kind. */
  condition(kind, status, reason, message) {
    this.#conditions = this.#conditions.filter((c) => c.kind !== kind);
    this.#conditions.push({ kind, status: Boolean(status), reason, message: String(message) });
    return this;
  }

  /** Records an event on the parent: Normal, or Warning with `{ warning: true }`. */
  event(reason, message, { warning = false } = {}) {
    this.#events.push({ warning: Boolean(warning), reason, message: String(message) });
    return this;
  }

  /**
   * Asks to run again after a delay: a number of seconds, or a duration such as
   * `{ minutes: 5 }` (any of `hours`, `minutes`, `seconds`, `milliseconds`, added up). Rounded up
   * to whole seconds; the earliest request wins.
   */
  requeueAfter(delay) {
    const secs = requeueSeconds(delay);
    const whole = Math.min(Math.ceil(secs), 0xffffffff);
    this.#requeueAfterSecs = Math.min(this.#requeueAfterSecs ?? whole, whole);
    return this;
  }

  /** Finalize phase: says whether this plugin's cleanup is complete. */
  finalized(done = true) {
    this.#finalized = Boolean(done);
    return this;
  }

  /** The status fragment so far. */
  get statusFragment() {
    return this.#status;
  }

  /** The conditions so far, as `{ kind, status, reason, message }`. */
  get conditions() {
    return this.#conditions;
  }

  /** The events so far, as `{ warning, reason, message }`. */
  get events() {
    return this.#events;
  }

  /** The requeue asked for, in seconds, or null. */
  get requeueAfterSecs() {
    return this.#requeueAfterSecs;
  }

  /** Whether the plugin reported its cleanup complete. */
  get isFinalized() {
    return this.#finalized;
  }
}

// ---------------------------------------------------------------------------------------------
// The WIT boundary

/** Parses one JSON text the host sent, or throws `error(message)`. */
function parse(text, error) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw error(`not valid JSON: ${e.message}`);
  }
}

/**
 * The Context for a WIT `request`, and the texts of desired objects that JSON.stringify would not
 * give back as sent (so that unchanged ones go back byte for byte).
 */
export function contextFromRequest(req) {
  const parent = parse(req.parent, (m) => new InvalidParent(m));
  if (!isObject(parent)) {
    throw new InvalidParent("not a JSON object");
  }
  const config = req.config.trim() === "" ? {} : parse(req.config, (m) => new InvalidConfig(m));
  const parseAll = (texts, what) =>
    texts.map((text, i) => parse(text, (m) => new Failed(`${what}[${i}] is ${m}`)));
  const observed = parseAll(req.observed, "observed");
  const desired = parseAll(req.desired, "desired");
  const sent = new WeakMap();
  desired.forEach((obj, i) => {
    if (obj !== null && typeof obj === "object") {
      const canonical = JSON.stringify(obj);
      if (canonical !== req.desired[i]) {
        sent.set(obj, { text: req.desired[i], canonical });
      }
    }
  });
  const phase = req.phase === "finalize" ? "finalize" : "reconcile";
  return { ctx: new Context({ phase, parent, observed, desired, config, now: req.now }), sent };
}

/** The WIT `response` for an Output. */
export function toResponse(out, sent = new WeakMap()) {
  if (!(out instanceof Output)) {
    throw new Failed(`the plugin must return an Output (ctx.output()), not ${describe(out)}`);
  }
  if (!Array.isArray(out.desired)) {
    throw new Failed(`output.desired must be an array, not ${describe(out.desired)}`);
  }
  const desired = out.desired.map((obj, i) => {
    if (!isObject(obj)) {
      throw new Failed(`desired[${i}] is not an object: ${describe(obj)}`);
    }
    const text = JSON.stringify(obj);
    const original = sent.get(obj);
    return original !== undefined && original.canonical === text ? original.text : text;
  });
  const status = out.statusFragment;
  return {
    desired,
    status: Object.keys(status).length === 0 ? null : JSON.stringify(status),
    conditions: out.conditions.map(({ kind, status, reason, message }) => ({ kind, status, reason, message })),
    events: out.events.map(({ warning, reason, message }) => ({ warning, reason, message })),
    requeueAfterSecs: out.requeueAfterSecs,
    finalized: out.isFinalized,
  };
}

/** The WIT `plugin-error` for anything thrown (jco throws a result's error as the variant). */
export function toWitError(e) {
  if (e instanceof PluginError) {
    return { tag: e.tag, val: e.message };
  }
  return { tag: "failed", val: String(e?.message ?? e) };
}

function describe(v) {
  if (v === null || v === undefined) return String(v);
  if (typeof v === "object") return v.constructor?.name ?? "object";
  return typeof v;
}

/** The default finalize: nothing to clean up. */
const finalizeNothing = (ctx) => ctx.output().finalized(true);

function stringList(value, what) {
  const list = value ?? [];
  if (!Array.isArray(list) || !list.every((k) => typeof k === "string")) {
    throw new TypeError(`windlass.plugin: info.${what} must be a list of strings`);
  }
  return [...list];
}

/** The user's definition behind a reconciler; testing.js runs it natively. */
const DEFINITION = Symbol("windlass.plugin");

/** The definition `windlass.plugin` made `reconciler` from (testing.js). */
export function definitionOf(reconciler) {
  const definition = reconciler?.[DEFINITION];
  if (definition === undefined) {
    throw new TypeError("not a plugin: pass what windlass.plugin({...}) returned");
  }
  return definition;
}

/**
 * A plugin, ready to export as the component's `reconciler`:
 * `export const reconciler = windlass.plugin({ info, reconcile, finalize })`.
 *
 * `info` is `{ name, version, parents, children, reads, finalizes }` (kinds as
 * `group/version/Kind`); `reconcile(ctx)` and `finalize(ctx)` return an Output or throw.
 * The default `finalize` has nothing to clean up.
 * @throws {TypeError} at once (natively on import, in the build during componentize) for an
 * `info` that is not well-formed.
 */
export function plugin({ info, reconcile, finalize = finalizeNothing }) {
  if (typeof info?.name !== "string" || typeof info?.version !== "string") {
    throw new TypeError("windlass.plugin: info needs a name and a version (strings)");
  }
  if (typeof reconcile !== "function" || typeof finalize !== "function") {
    throw new TypeError("windlass.plugin: reconcile (and finalize, if given) must be functions");
  }
  const witInfo = {
    name: info.name,
    version: info.version,
    parentKinds: stringList(info.parents, "parents"),
    childKinds: stringList(info.children, "children"),
    readsKinds: stringList(info.reads, "reads"),
    finalizes: Boolean(info.finalizes),
  };
  const definition = Object.freeze({ info: witInfo, reconcile, finalize });
  return Object.freeze({
    info: () => ({
      ...witInfo,
      parentKinds: [...witInfo.parentKinds],
      childKinds: [...witInfo.childKinds],
      readsKinds: [...witInfo.readsKinds],
    }),
    reconcile(req) {
      try {
        const { ctx, sent } = contextFromRequest(req);
        return toResponse(runPhase(definition, ctx), sent);
      } catch (e) {
        throw toWitError(e);
      }
    },
    [DEFINITION]: definition,
  });
}

/** Runs the phase `ctx` asks for; the Output as the plugin returned it. */
export function runPhase(definition, ctx) {
  const run = ctx.phase === "finalize" ? definition.finalize : definition.reconcile;
  const out = run(ctx);
  if (typeof out?.then === "function") {
    throw new Failed(`${ctx.phase} must not be async: the host calls it synchronously`);
  }
  return out;
}
