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
// The transformation is in transform.js (pure); the Windlass SDK (guest-sdk/js) owns the WIT
// world. Test with `test.sh`, build with `build.sh OUT.wasm`.

import * as windlass from "../../guest-sdk/js/windlass.js";
import { applyConventions } from "./transform.js";

export const reconciler = windlass.plugin({
  info: {
    name: "sampledb-conventions",
    version: "0.1.0",
    parents: ["samples.windlass.dev/v1alpha1/SampleDB"],
    children: [
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
  },

  reconcile(ctx) {
    const out = ctx.output();
    out.desired = applyConventions(ctx.parent, ctx.desired, ctx.config);
    windlass.log.debug(`${ctx.name}: conventions applied to ${out.desired.length} objects`);
    return out;
  },
});
