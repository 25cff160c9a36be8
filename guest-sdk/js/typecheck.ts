// Type-checked by test.sh (tsc --noEmit --strict) against windlass.d.ts and testing.d.ts: a
// small plugin that uses the whole surface. Never run.
import * as windlass from "./windlass.js";
import { Failed, InvalidConfig, InvalidParent, type Context, type KubeObject, type Output } from "./windlass.js";
import { harness } from "./testing.js";

function reconcile(ctx: Context): Output {
  const message: unknown = ctx.spec.message;
  if (typeof message !== "string" || message === "") {
    throw new InvalidParent("spec.message: must be a non-empty string");
  }
  if (ctx.config.extra !== undefined) throw new InvalidConfig("unknown field `extra`");
  const existing: KubeObject | undefined = ctx.findObserved("v1/ConfigMap", `${ctx.name}-greeting`);
  const all: KubeObject[] = ctx.observedOf("v1/Secret");
  windlass.log.debug(`${ctx.namespace ?? "(cluster)"}/${ctx.name} ${ctx.uid} at ${ctx.now}: ${all.length}`);
  const out = ctx.output();
  out.apply({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: `${ctx.name}-greeting` }, data: { message } });
  out.remove("v1/ConfigMap", "old");
  const found: KubeObject | undefined = out.find("v1/ConfigMap", `${ctx.name}-greeting`);
  out.desired = out.desired.filter((o) => o !== found || existing === undefined);
  return out
    .status("message", message)
    .condition("Greeted", true, "Published", "done")
    .event("Published", "hi")
    .event("Slow", "slow", { warning: true })
    .requeueAfter(30)
    .requeueAfter({ minutes: 1, seconds: 30 });
}

export const reconciler: windlass.Reconciler = windlass.plugin({
  info: { name: "example", version: "0.1.0", parents: ["example.windlass.dev/v1alpha1/Greeting"], children: ["v1/ConfigMap"] },
  reconcile,
  finalize: (ctx) => ctx.output().finalized(),
});

const out: Output = harness({ parent: { metadata: { name: "hi" }, spec: { message: "x" } }, phase: "finalize" }).run(reconciler);
const finalized: boolean = out.isFinalized;
const secs: number | null = out.requeueAfterSecs;
const tag: "invalid-parent" | "invalid-config" | "failed" = new Failed("x").tag;
const res: windlass.WitResponse = reconciler.reconcile(harness({ parent: {} }).request());
void [finalized, secs, tag, res];

// @ts-expect-error: reconcile must return an Output
windlass.plugin({ info: { name: "x", version: "1" }, reconcile: () => ({}) });
// @ts-expect-error: info needs a version
windlass.plugin({ info: { name: "x" }, reconcile });
