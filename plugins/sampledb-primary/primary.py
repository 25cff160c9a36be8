"""sampledb-primary: primary election for SampleDB, written in Python on the Windlass SDK.

A SampleDB runs as a StatefulSet whose Pods are all alike; this plugin marks one ready Pod as
the primary and points the read-write (client) Service at it.

What it does on each reconcile:

* Database Pods are the observed Pods labelled `statefulset.kubernetes.io/pod-name` and
  `app.kubernetes.io/instance=<parent name>` that are not being deleted.
* The current primary (`status.primary`) stays primary while its Pod is Ready and is the Pod
  that was elected (`status.primaryUID`); otherwise the Ready Pod with the lowest ordinal
  (`<name>-<ordinal>`) takes over. A Pod of the primary's name made again (its Pod deleted, the
  StatefulSet's new one) is another Pod: a Ready replica takes over from it, and it is elected
  again only when no other Pod is Ready. Whether the primary fails over so does not depend on
  whether a reconcile happened to run while the Pod was gone: the new Pod can be Ready within a
  second of the old one's deletion.
* A planned switchover: when the desired StatefulSet (from an earlier plugin) carries the
  annotation `samples.windlass.dev/switchover-to: <pod>` — the upgrade plugin asks so before
  the roll restarts the primary's Pod — the primary moves to that Pod if it is Ready, with a
  Normal `Switchover` event naming why (`samples.windlass.dev/switchover-for`); a Pod not
  Ready is not handed the primary (the upgrade asks again on its next run), nor is a request
  made of another primary than the current one (`samples.windlass.dev/switchover-from`: the
  asker saw a status that has moved on since). A failover while
  a switchover is asked for goes to the Pod asked for, and is reported as a failover.
* Every database Pod gets the label `samples.windlass.dev/role=primary|replica`: the plugin emits
  a Pod object holding only that label, which the host server-side-applies (it does not own the
  Pods, the StatefulSet does).
* The client Service `<name>` that an earlier plugin (storage) produced gets
  `spec.selector["samples.windlass.dev/role"] = "primary"`; the other desired objects pass
  through unchanged. If no earlier plugin produced that Service, none is made up.
* Status `{"primary": <pod>, "primaryUID": <its uid>}`. While no Pod is ready the last
  primary stays recorded, with the uid of the Pod now of its name (so it is kept when that Pod
  comes back, rather than a replica that may lag behind it), and the
  condition `PrimaryElected` says there is none: reason `Elected`, or `NoReadyReplica` with a
  requeue after 10 s; a Normal `Elected` event on the first election and a Warning
  `FailedOver` event when the primary moves.
* The finalize phase has nothing to clean up: the SDK's default returns the desired set
  unchanged.

The decisions are pure functions below, unit-tested by `test_primary.py` (natively, through
`windlass.testing`); `app.py` only exports the plugin. Build with `build.sh OUT.wasm`.
"""

import windlass
from windlass import InvalidParent, log

ROLE_LABEL = "samples.windlass.dev/role"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
SWITCHOVER_TO = "samples.windlass.dev/switchover-to"
SWITCHOVER_FOR = "samples.windlass.dev/switchover-for"
SWITCHOVER_FROM = "samples.windlass.dev/switchover-from"
REQUEUE_WITHOUT_PRIMARY_SECS = 10


class Primary(windlass.Plugin):
    def info(self):
        return windlass.Info(
            "sampledb-primary",
            "0.1.0",
            parents=["samples.windlass.dev/v1alpha1/SampleDB"],
            children=["v1/Pod", "v1/Service"],
            reads=["v1/Pod"],
        )

    def reconcile(self, ctx):
        name = ctx.name
        if not name:
            raise InvalidParent("metadata.name: missing")
        current = text(ctx.status.get("primary"))
        current_uid = text(ctx.status.get("primaryUID"))
        db_pods = database_pods(name, ctx.observed_of("v1/Pod"))
        pods = [pod_name(pod) for pod in db_pods]
        uids = {pod_name(pod): pod_uid(pod) for pod in db_pods}
        ready = [pod_name(pod) for pod in db_pods if is_ready(pod)]
        primary = choose_primary(name, current, ready, made_again(current, current_uid, uids))

        out = ctx.output()
        # A failover (the primary not Ready, or made again) goes to the Pod asked for too, but is
        # no planned switchover.
        failing_over = primary != current
        planned = switchover(out.find("apps/v1/StatefulSet", name), current, primary, ready)
        if planned:
            primary = planned[0]
        service = out.find("v1/Service", name)
        if service is not None:
            select_primary(service)
        for pod in sorted(pods, key=lambda pod: ordinal(name, pod)):
            out.apply(role_patch(pod, "primary" if pod == primary else "replica"))
        if primary:
            out.status("primary", primary)
            if uids.get(primary):
                out.status("primaryUID", uids[primary])
        else:
            # No ready Pod: keep the last primary on record, as the Pod now of its name (see
            # above).
            if current and uids.get(current) and uids[current] != current_uid:
                out.status("primaryUID", uids[current])
            out.requeue_after(REQUEUE_WITHOUT_PRIMARY_SECS)
        report(out, current, primary, planned[1] if planned and not failing_over else None)
        log.debug(f"{name}: {len(ready)}/{len(pods)} database Pods ready, primary {primary} (was {current})")
        return out


def text(value):
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value else None


def labels(obj):
    return (obj.get("metadata") or {}).get("labels") or {}


def database_pods(name, pods):
    """The Pods of the parent's StatefulSet that are not being deleted."""
    return [
        pod
        for pod in pods
        if POD_NAME_LABEL in labels(pod)
        and labels(pod).get(INSTANCE_LABEL) == name
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]


def pod_name(pod):
    return pod["metadata"]["name"]


def pod_uid(pod):
    return text((pod.get("metadata") or {}).get("uid"))


def made_again(current, current_uid, uids):
    """Whether the Pod now named as the primary is not the one that was elected: deleted and
    made again by the StatefulSet since. Without a recorded uid (a status written before the
    uid was) or a uid on the Pod, the name decides."""
    uid = uids.get(current)
    return bool(current_uid and uid and uid != current_uid)


def is_ready(pod):
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def ordinal(name, pod):
    """The StatefulSet ordinal of `<name>-<ordinal>`; Pods not named so sort last."""
    prefix = name + "-"
    suffix = pod[len(prefix):] if pod.startswith(prefix) else ""
    return (0, int(suffix), pod) if suffix.isdigit() else (1, 0, pod)


def choose_primary(name, current, ready, made_again=False):
    """Keep the current primary while it is ready and not made again; else the ready Pod with
    the lowest ordinal — other than a primary made again, unless it is the only one ready."""
    if current in ready and not made_again:
        return current
    if not ready:
        return None
    others = [pod for pod in ready if pod != current] if made_again else ready
    return min(others or ready, key=lambda pod: ordinal(name, pod))


def switchover(statefulset, current, primary, ready):
    """A planned switchover the desired StatefulSet asks for (see above): `(pod, why)` when
    the primary is to move to a Ready Pod other than the one chosen, else None."""
    annotations = ((statefulset or {}).get("metadata") or {}).get("annotations") or {}
    to = text(annotations.get(SWITCHOVER_TO))
    if not to or current is None or primary is None or to == primary or to not in ready:
        return None
    asked_from = text(annotations.get(SWITCHOVER_FROM))
    if asked_from is not None and asked_from != current:
        # Asked of a primary that is no longer: the asker's view was stale.
        return None
    return to, text(annotations.get(SWITCHOVER_FOR)) or "a request on the StatefulSet"


def role_patch(pod, role):
    """A Pod object carrying only the role label: the host applies just these fields."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "labels": {ROLE_LABEL: role}},
    }


def select_primary(service):
    """Points the client Service (edited in place) at the primary only."""
    spec = service.setdefault("spec", {})
    selector = spec.get("selector") or {}
    spec["selector"] = {**selector, ROLE_LABEL: "primary"}


def report(out, current, primary, planned_for=None):
    """The condition and events that tell what happened; `planned_for` says why a planned
    switchover moved the primary."""
    if primary is None:
        out.condition("PrimaryElected", False, "NoReadyReplica", "no database Pod is ready")
        return
    out.condition("PrimaryElected", True, "Elected", f"{primary} is the primary")
    if current is None:
        out.event("Elected", f"{primary} is the primary")
    elif planned_for is not None:
        out.event("Switchover", f"planned switchover from {current} to {primary} for {planned_for}")
    elif current != primary:
        out.event("FailedOver", f"primary moved from {current} to {primary}", warning=True)
