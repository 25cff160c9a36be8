"""sampledb-primary: primary election for SampleDB, written in Python.

A SampleDB runs as a StatefulSet whose Pods are all alike; this plugin marks one ready Pod as
the primary and points the read-write (client) Service at it.

What it does on each reconcile:

* Database Pods are the observed Pods labelled `statefulset.kubernetes.io/pod-name` and
  `app.kubernetes.io/instance=<parent name>` that are not being deleted.
* The current primary (`status.primary`) stays primary while its Pod is Ready; otherwise the
  Ready Pod with the lowest ordinal (`<name>-<ordinal>`) takes over.
* Every database Pod gets the label `samples.windlass.dev/role=primary|replica`: the plugin emits
  a Pod object holding only that label, which the host server-side-applies (it does not own the
  Pods, the StatefulSet does).
* The client Service `<name>` that an earlier plugin (storage) produced gets
  `spec.selector["samples.windlass.dev/role"] = "primary"`; the other desired objects pass
  through unchanged. If no earlier plugin produced that Service, none is made up.
* Status `{"primary": <pod>}`. While no Pod is ready the last primary stays recorded (so it
  is kept when its Pod comes back, rather than a replica that may lag behind it) and the
  condition `PrimaryElected` says there is none: reason `Elected`, or `NoReadyReplica` with a
  requeue after 10 s; a Normal `Elected` event
  on the first election and a Warning `FailedOver` event when the primary moves.
* The finalize phase has nothing to clean up: it returns the desired set unchanged.

The decisions live in `primary.py` (pure functions, unit-tested by `test_primary.py`); this
module is only the glue to the `windlass:plugin` WIT world. Build with `build.sh OUT.wasm`.
"""

import json

import primary
from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log, types

NAME = "sampledb-primary"
VERSION = "0.1.0"


class Reconciler(exports.Reconciler):
    def info(self) -> types.PluginInfo:
        return types.PluginInfo(
            name=NAME,
            version=VERSION,
            parent_kinds=["samples.windlass.dev/v1alpha1/SampleDB"],
            child_kinds=["v1/Pod", "v1/Service"],
            reads_kinds=["v1/Pod"],
            finalizes=False,
        )

    def reconcile(self, req: types.Request) -> types.Response:
        if req.phase == types.Phase.FINALIZE:
            return response(list(req.desired), finalized=True)
        try:
            parent = json.loads(req.parent)
            observed = [json.loads(text) for text in req.observed]
            election = primary.elect(parent, observed, list(req.desired))
        except primary.InvalidParent as e:
            raise Err(types.PluginError_InvalidParent(str(e)))
        except ValueError as e:
            raise Err(types.PluginError_Failed(f"input is not JSON: {e}"))
        except Exception as e:  # a bug or an input of an unexpected shape: the host retries
            raise Err(types.PluginError_Failed(f"{type(e).__name__}: {e}"))
        log.log(log.Level.DEBUG, election.log)
        return response(
            election.desired,
            # No ready Pod: keep the last primary on record (see above).
            status=json.dumps({"primary": election.primary} if election.primary else {}),
            conditions=[types.Condition(**c) for c in election.conditions],
            events=[types.Event(**e) for e in election.events],
            requeue_after_secs=election.requeue_after_secs,
        )


def response(desired, status=None, conditions=(), events=(), requeue_after_secs=None, finalized=False):
    return types.Response(
        desired=desired,
        status=status,
        conditions=list(conditions),
        events=list(events),
        requeue_after_secs=requeue_after_secs,
        finalized=finalized,
    )
