// sampledb-conventions: the SampleDB house conventions, written in JavaScript.
//
// Runs after the plugins that produce SampleDB's objects and, on every desired object but Pods
// (those are label patches of Pods the StatefulSet owns and stay exactly as they are):
// - adds the labels `app.kubernetes.io/part-of: sampledb` and `app.kubernetes.io/version:
//   <spec.version>` to metadata unless set; pod templates (StatefulSet, Job, CronJob) get
//   `part-of` only, so that a version bump alone does not roll the Pods;
// - gives every container and init container in those templates without `resources` the
//   config's `resources` (default requests cpu 100m, memory 128Mi; limits memory 512Mi);
// - adds a PodDisruptionBudget `<name>` (maxUnavailable 1, the StatefulSet's selector) when the
//   StatefulSet `<name>` is desired.
// It never touches a StatefulSet's selector or volume claim templates (both immutable).
// Config: `{ "resources": { "requests": {...}, "limits": {...} } }`; unknown keys are refused.
//
// The transformation is in transform.js (pure; `node --test`); this module is the glue to the
// `windlass:plugin` WIT world. Build with `build.sh OUT.wasm`.

import log from "windlass:plugin/log@0.1.0";
import { ConventionsError, applyConventions } from "./transform.js";

const NAME = "sampledb-conventions";
const VERSION = "0.1.0";

function info() {
  return {
    name: NAME,
    version: VERSION,
    parentKinds: ["samples.windlass.dev/v1alpha1/SampleDB"],
    childKinds: [
      "v1/Service",
      "apps/v1/StatefulSet",
      "v1/ConfigMap",
      "v1/Secret",
      "batch/v1/Job",
      "batch/v1/CronJob",
      "policy/v1/PodDisruptionBudget",
      "v1/Pod",
      "snapshot.storage.k8s.io/v1/VolumeSnapshot",
    ],
    readsKinds: [],
    finalizes: false,
  };
}

function response(desired, finalized = false) {
  return { desired, status: null, conditions: [], events: [], requeueAfterSecs: null, finalized };
}

function parseJson(what, text, errorKind) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ConventionsError(errorKind, `${what}: not valid JSON: ${e.message}`);
  }
}

function reconcile(req) {
  if (req.phase === "finalize") {
    return response(req.desired, true);
  }
  try {
    const parent = parseJson("parent", req.parent, "invalid-parent");
    const config = parseJson("config", req.config, "invalid-config");
    const desired = applyConventions(parent, req.desired, config);
    log.log("debug", `${parent.metadata.name}: conventions applied to ${desired.length} objects`);
    return response(desired);
  } catch (e) {
    // A result's error is thrown as the WIT variant value.
    if (e instanceof ConventionsError) {
      throw { tag: e.kind, val: e.message };
    }
    throw { tag: "failed", val: String(e?.message ?? e) };
  }
}

export const reconciler = { info, reconcile };
