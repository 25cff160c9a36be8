// Unit tests of the SDK: node --test (test.sh also type-checks windlass.d.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import * as windlass from "./windlass.js";
import { Failed, InvalidConfig, InvalidParent, Output } from "./windlass.js";
import { NOW, harness } from "./testing.js";

const parent = {
  apiVersion: "example.windlass.dev/v1alpha1",
  kind: "Greeting",
  metadata: { name: "hello", namespace: "demo", uid: "u-1", generation: 3 },
  spec: { message: "Hi" },
};
const configMap = (name, data = {}) => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { name }, data });

const info = { name: "t", version: "0.1.0", parents: ["example.windlass.dev/v1alpha1/Greeting"], children: ["v1/ConfigMap"] };
const pluginWith = (reconcile, finalize) => windlass.plugin({ info, reconcile, finalize });
const request = (over = {}) => harness({ parent, ...over }).request();

/** The WIT error `reconciler.reconcile(req)` throws. */
function witError(reconciler, req) {
  try {
    reconciler.reconcile(req);
  } catch (e) {
    return e;
  }
  assert.fail("reconcile did not throw");
}

test("info maps to the WIT record with defaults for what is not declared", () => {
  assert.deepEqual(pluginWith(() => {}).info(), {
    name: "t",
    version: "0.1.0",
    parentKinds: ["example.windlass.dev/v1alpha1/Greeting"],
    childKinds: ["v1/ConfigMap"],
    readsKinds: [],
    finalizes: false,
  });
});

test("a malformed info is refused when the plugin is defined", () => {
  assert.throws(() => windlass.plugin({ info: { name: "t" }, reconcile() {} }), /name and a version/);
  assert.throws(() => windlass.plugin({ info: { ...info, children: "v1/ConfigMap" }, reconcile() {} }), /info.children/);
  assert.throws(() => windlass.plugin({ info }), /reconcile/);
});

test("the reconciler is what the WIT world exports, and nothing else enumerable", () => {
  assert.deepEqual(Object.keys(pluginWith(() => {})).sort(), ["info", "reconcile"]);
});

test("the context reads the parent", () => {
  const ctx = harness({ parent, config: { a: 1 }, now: "2026-02-03T04:05:06Z" }).context();
  assert.equal(ctx.phase, "reconcile");
  assert.equal(ctx.name, "hello");
  assert.equal(ctx.namespace, "demo");
  assert.equal(ctx.uid, "u-1");
  assert.equal(ctx.generation, 3);
  assert.deepEqual(ctx.spec, { message: "Hi" });
  assert.deepEqual(ctx.status, {});
  assert.deepEqual(ctx.config, { a: 1 });
  assert.equal(ctx.now, "2026-02-03T04:05:06Z");
  assert.equal(harness({ parent: { metadata: { name: "c" } } }).context().namespace, undefined);
  assert.equal(harness({ parent }).context().now, NOW);
});

test("observed objects are found by kind and name", () => {
  const secret = { apiVersion: "v1", kind: "Secret", metadata: { name: "hello" } };
  const ctx = harness({ parent, observed: [configMap("a"), secret, configMap("b")] }).context();
  assert.deepEqual(ctx.observedOf("v1/ConfigMap").map((o) => o.metadata.name), ["a", "b"]);
  assert.deepEqual(ctx.findObserved("v1/Secret", "hello"), secret);
  assert.equal(ctx.findObserved("v1/Secret", "a"), undefined);
  assert.equal(ctx.findObserved("apps/v1/ConfigMap", "a"), undefined);
});

test("apply adds, or replaces the object of the same kind and name in place", () => {
  const out = new Output([configMap("a"), configMap("b")]);
  out.apply(configMap("c")).apply(configMap("a", { x: "1" }));
  assert.deepEqual(out.desired.map((o) => [o.metadata.name, o.data]), [["a", { x: "1" }], ["b", {}], ["c", {}]]);
  out.apply({ apiVersion: "v2", kind: "ConfigMap", metadata: { name: "a" } });
  assert.equal(out.desired.length, 4, "another apiVersion is another object");
});

test("apply refuses an object without apiVersion, kind or name", () => {
  assert.throws(
    () => new Output().apply({ apiVersion: "v1", kind: "ConfigMap", metadata: {} }),
    (e) => e instanceof Failed && e.message.startsWith("a child needs apiVersion, kind and metadata.name: {"),
  );
});

test("find and remove address objects by kind and name", () => {
  const out = new Output([configMap("a"), configMap("b")]);
  assert.equal(out.find("v1/ConfigMap", "b").metadata.name, "b");
  assert.equal(out.remove("v1/ConfigMap", "a").metadata.name, "a");
  assert.equal(out.remove("v1/ConfigMap", "a"), undefined);
  assert.equal(out.find("v1/ConfigMap", "a"), undefined);
  assert.equal(out.desired.length, 1);
});

test("ctx.output starts from the earlier plugins' set without sharing the array", () => {
  const ctx = harness({ parent, desired: [configMap("a")] }).context();
  const out = ctx.output();
  out.apply(configMap("b"));
  assert.equal(ctx.desired.length, 1);
  assert.equal(out.desired.length, 2);
});

test("conditions replace their kind; events keep their order", () => {
  const out = new Output()
    .condition("Ready", false, "Waiting", "not yet")
    .condition("Synced", true, "Done", "ok")
    .condition("Ready", true, "Up", "up")
    .event("Created", "made a")
    .event("Slow", "took long", { warning: true });
  assert.deepEqual(out.conditions, [
    { kind: "Synced", status: true, reason: "Done", message: "ok" },
    { kind: "Ready", status: true, reason: "Up", message: "up" },
  ]);
  assert.deepEqual(out.events, [
    { warning: false, reason: "Created", message: "made a" },
    { warning: true, reason: "Slow", message: "took long" },
  ]);
});

test("requeueAfter keeps the earliest request, in whole seconds rounded up", () => {
  const out = new Output();
  assert.equal(out.requeueAfterSecs, null);
  out.requeueAfter(30).requeueAfter(90).requeueAfter(4.2);
  assert.equal(out.requeueAfterSecs, 5);
  assert.throws(() => out.requeueAfter(-1), TypeError);
  assert.throws(() => out.requeueAfter("5"), TypeError);
});

test("requeueAfter takes a duration in units, added up and rounded up", () => {
  const out = new Output();
  out.requeueAfter({ minutes: 5 });
  assert.equal(out.requeueAfterSecs, 300);
  out.requeueAfter({ hours: 1 });
  assert.equal(out.requeueAfterSecs, 300, "the earliest request wins");
  out.requeueAfter({ seconds: 1, milliseconds: 200 });
  assert.equal(out.requeueAfterSecs, 2);
  assert.throws(() => out.requeueAfter({ days: 1 }), /unknown unit "days"/);
  assert.throws(() => out.requeueAfter({ minutes: -1 }), /minutes is not a non-negative number/);
  assert.throws(() => out.requeueAfter(null), TypeError);
  assert.throws(() => out.requeueAfter([5]), TypeError);
  assert.throws(() => out.requeueAfter({}), TypeError, "an empty duration is no delay");
  assert.throws(() => out.requeueAfter(new Date()), TypeError);
  assert.throws(() => out.requeueAfter({ toString: 1 }), /unknown unit "toString"/);
  assert.equal(out.requeueAfterSecs, 2, "a refused delay changes nothing");
  const tenth = new Output().requeueAfter({ minutes: 0.1 });
  assert.equal(tenth.requeueAfterSecs, 6);
});

test("the response carries the output in the WIT shape", () => {
  const reconciler = pluginWith((ctx) =>
    ctx
      .output()
      .apply(configMap(`${ctx.name}-greeting`, { message: ctx.spec.message }))
      .status("message", ctx.spec.message)
      .condition("Greeted", true, "Published", "done")
      .event("Published", "hi", { warning: true })
      .requeueAfter(60),
  );
  const res = reconciler.reconcile(request({ desired: [configMap("earlier")] }));
  assert.deepEqual(res, {
    desired: [JSON.stringify(configMap("earlier")), JSON.stringify(configMap("hello-greeting", { message: "Hi" }))],
    status: '{"message":"Hi"}',
    conditions: [{ kind: "Greeted", status: true, reason: "Published", message: "done" }],
    events: [{ warning: true, reason: "Published", message: "hi" }],
    requeueAfterSecs: 60,
    finalized: false,
  });
});

test("an empty output has no status and no requeue", () => {
  const res = pluginWith((ctx) => ctx.output()).reconcile(request());
  assert.deepEqual(res, { desired: [], status: null, conditions: [], events: [], requeueAfterSecs: null, finalized: false });
});

test("unchanged objects go back byte for byte, changed ones are serialized", () => {
  // Not what JSON.stringify gives: spaces, an integer beyond 2^53, an escaped character.
  const untouched = '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"n": "\\u0041"}, "big": 12345678901234567891}';
  const edited = '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"},"big":12345678901234567891}';
  const reconciler = pluginWith((ctx) => {
    const out = ctx.output();
    out.find("v1/ConfigMap", "b").metadata.labels = { x: "y" };
    return out;
  });
  const req = { ...request(), desired: [untouched, edited] };
  const [first, second] = reconciler.reconcile(req).desired;
  assert.equal(first, untouched);
  assert.equal(
    second,
    '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","labels":{"x":"y"}},"big":12345678901234567000}',
  );
});

test("the default finalize keeps the desired set and reports finalized", () => {
  const reconciler = pluginWith(() => assert.fail("reconcile ran"));
  const res = reconciler.reconcile(request({ phase: "finalize", desired: [configMap("a")] }));
  assert.deepEqual(res.desired, [JSON.stringify(configMap("a"))]);
  assert.equal(res.finalized, true);
  const out = harness({ parent, phase: "finalize" }).run(reconciler);
  assert.equal(out.isFinalized, true);
});

test("a plugin's own finalize runs in the finalize phase", () => {
  const reconciler = pluginWith(
    () => assert.fail("reconcile ran"),
    (ctx) => ctx.output().finalized(false).requeueAfter(10),
  );
  const res = reconciler.reconcile(request({ phase: "finalize" }));
  assert.equal(res.finalized, false);
  assert.equal(res.requeueAfterSecs, 10);
});

test("SDK errors become their WIT cases, anything else failed", () => {
  const throwing = (e) => pluginWith(() => {
    throw e;
  });
  assert.deepEqual(witError(throwing(new InvalidParent("spec.x: missing")), request()), {
    tag: "invalid-parent",
    val: "spec.x: missing",
  });
  assert.deepEqual(witError(throwing(new InvalidConfig("unknown field `y`")), request()), {
    tag: "invalid-config",
    val: "unknown field `y`",
  });
  assert.deepEqual(witError(throwing(new Failed("later")), request()), { tag: "failed", val: "later" });
  assert.deepEqual(witError(throwing(new TypeError("x is undefined")), request()), {
    tag: "failed",
    val: "x is undefined",
  });
  assert.deepEqual(witError(throwing("a string"), request()), { tag: "failed", val: "a string" });
});

test("returning anything but an Output, or a promise, fails", () => {
  assert.deepEqual(witError(pluginWith(() => ({ desired: [] })), request()), {
    tag: "failed",
    val: "the plugin must return an Output (ctx.output()), not Object",
  });
  assert.deepEqual(witError(pluginWith(async (ctx) => ctx.output()), request()), {
    tag: "failed",
    val: "reconcile must not be async: the host calls it synchronously",
  });
  const notAnObject = pluginWith((ctx) => {
    const out = ctx.output();
    out.desired.push("text");
    return out;
  });
  assert.deepEqual(witError(notAnObject, request()), { tag: "failed", val: "desired[0] is not an object: string" });
});

test("inputs that do not parse are refused as the Rust SDK refuses them", () => {
  const reconciler = pluginWith((ctx) => ctx.output());
  const err = (over) => witError(reconciler, { ...request(), ...over });
  assert.equal(err({ parent: "{" }).tag, "invalid-parent");
  assert.match(err({ parent: "{" }).val, /^not valid JSON: /);
  assert.deepEqual(err({ parent: "[]" }), { tag: "invalid-parent", val: "not a JSON object" });
  assert.equal(err({ config: "{" }).tag, "invalid-config");
  assert.match(err({ desired: ["{}", "nope"] }).val, /^desired\[1\] is not valid JSON: /);
  assert.match(err({ observed: ["nope"] }).val, /^observed\[0\] is not valid JSON: /);
  // No config at all reads as {}.
  const seen = [];
  pluginWith((ctx) => (seen.push(ctx.config), ctx.output())).reconcile({ ...request(), config: " " });
  assert.deepEqual(seen, [{}]);
});

test("the harness returns the Output or throws what the host would see", () => {
  const ok = harness({ parent, desired: [configMap("a")] }).run(pluginWith((ctx) => ctx.output().status("n", 1)));
  assert.ok(ok instanceof Output);
  assert.deepEqual(ok.statusFragment, { n: 1 });
  assert.equal(ok.desired.length, 1);

  const refused = pluginWith(() => {
    throw new InvalidParent("spec.message: missing");
  });
  assert.throws(() => harness({ parent }).run(refused), (e) => e instanceof InvalidParent && e.message === "spec.message: missing");

  const buggy = pluginWith((ctx) => ctx.spec.nothing.here);
  assert.throws(() => harness({ parent }).run(buggy), (e) => e instanceof Failed && e.cause instanceof TypeError);
  assert.throws(() => harness({ parent }).run({ info() {}, reconcile() {} }), /not a plugin/);
});

test("the harness gives the plugin copies, not the test's objects", () => {
  const desired = [configMap("a")];
  harness({ parent, desired }).run(pluginWith((ctx) => {
    ctx.desired[0].data.changed = "yes";
    return ctx.output();
  }));
  assert.deepEqual(desired[0].data, {});
});

test("log lines go to the bound host log, natively to stderr", (t) => {
  const lines = [];
  t.mock.method(console, "error", (line) => lines.push(line));
  windlass.log.info("natively");
  windlass.bindHostLog({ log: (level, message) => lines.push(`${level}|${message}`) });
  try {
    windlass.log.debug("to the host");
    windlass.log.warn(42);
  } finally {
    windlass.bindHostLog(null);
  }
  windlass.log.error("back");
  assert.deepEqual(lines, ["[info] natively", "debug|to the host", "warn|42", "[error] back"]);
});

test("serve.js answers a request line with the response or the plugin-error, as JSON", async () => {
  const { answer } = await import("./serve.js");
  const reconciler = pluginWith((ctx) => {
    if (ctx.spec.message === "") throw new InvalidParent("spec.message: empty");
    return ctx.output().apply(configMap(`${ctx.name}-greeting`)).requeueAfter(5);
  });
  const ok = JSON.parse(answer(reconciler, JSON.stringify(request())));
  assert.deepEqual(ok, { ok: reconciler.reconcile(request()) });
  assert.equal(ok.ok.requeueAfterSecs, 5);
  assert.equal(JSON.parse(ok.ok.desired[0]).metadata.name, "hello-greeting");
  const refused = request({ parent: { ...parent, spec: { message: "" } } });
  assert.deepEqual(JSON.parse(answer(reconciler, JSON.stringify(refused))), {
    err: { tag: "invalid-parent", val: "spec.message: empty" },
  });
  assert.equal(JSON.parse(answer(reconciler, "{")).err.tag, "failed");
});
