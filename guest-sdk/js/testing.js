// Run a plugin natively, without a WebAssembly runtime: fast unit tests with `node --test`.
//
//   import { harness } from "./windlass/testing.js";
//   const out = harness({ parent: { metadata: { name: "hi" }, spec: { message: "hello" } } })
//     .run(reconciler);
//   assert.equal(out.find("v1/ConfigMap", "hi-greeting").data.message, "hello");
//
// The inputs go through the same JSON texts and parsing as in the component, so a plugin sees
// exactly what the host would give it; the host's conformance cases (`windlass plugin test`)
// check that the component agrees.

import {
  Failed,
  PluginError,
  contextFromRequest,
  definitionOf,
  runPhase,
  toResponse,
} from "./windlass.js";

/** The time a harness gives plugins unless told otherwise. */
export const NOW = "2026-01-01T00:00:00Z";

/**
 * A parent, observed objects, the earlier plugins' desired set and config, for one run.
 * Everything but `parent` is optional: no observed or desired objects, config `{}`, time
 * {@link NOW}, phase `"reconcile"`.
 */
export function harness({ parent, observed = [], desired = [], config = {}, now = NOW, phase = "reconcile" }) {
  const request = () => ({
    phase,
    parent: JSON.stringify(parent),
    observed: observed.map((o) => JSON.stringify(o)),
    desired: desired.map((o) => JSON.stringify(o)),
    config: JSON.stringify(config),
    now,
  });
  return {
    /** The WIT request the host would send, for `reconciler.reconcile(request)`. */
    request,

    /** The Context the plugin will see. */
    context: () => contextFromRequest(request()).ctx,

    /**
     * Runs the plugin's phase and returns its Output, checked as the component checks it.
     * @throws {PluginError} the plugin's InvalidParent, InvalidConfig or Failed; anything else
     * it throws as Failed (its message, the original as `cause`), as the host would see it.
     */
    run(reconciler) {
      const definition = definitionOf(reconciler);
      try {
        const { ctx } = contextFromRequest(request());
        const out = runPhase(definition, ctx);
        toResponse(out);
        return out;
      } catch (e) {
        if (e instanceof PluginError) throw e;
        throw new Failed(String(e?.message ?? e), { cause: e });
      }
    },
  };
}
