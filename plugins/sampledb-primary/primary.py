"""Primary election for SampleDB, as pure functions over plain JSON values.

Nothing here knows about WebAssembly or the WIT contract: `app.py` is the glue. That keeps this
module importable by `python3 -m unittest` on any machine.
"""

import json
from dataclasses import dataclass, field
from typing import Optional

ROLE_LABEL = "samples.windlass.dev/role"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
REQUEUE_WITHOUT_PRIMARY_SECS = 10


class InvalidParent(Exception):
    """The parent cannot be acted on; the message names the field."""


@dataclass
class Election:
    """What the plugin decided for one parent."""

    primary: Optional[str]
    desired: list  # JSON text, one object each
    conditions: list = field(default_factory=list)  # dicts: kind, status, reason, message
    events: list = field(default_factory=list)  # dicts: warning, reason, message
    requeue_after_secs: Optional[int] = None
    log: str = ""


def parent_name(parent):
    """The parent's metadata.name, or InvalidParent."""
    name = (parent.get("metadata") or {}).get("name") if isinstance(parent, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidParent("metadata.name: missing")
    return name


def labels(obj):
    return (obj.get("metadata") or {}).get("labels") or {}


def is_kind(obj, api_version, kind):
    return obj.get("apiVersion") == api_version and obj.get("kind") == kind


def database_pods(name, observed):
    """The observed Pods of the parent's StatefulSet that are not being deleted."""
    return [
        pod
        for pod in observed
        if is_kind(pod, "v1", "Pod")
        and POD_NAME_LABEL in labels(pod)
        and labels(pod).get(INSTANCE_LABEL) == name
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]


def pod_name(pod):
    return pod["metadata"]["name"]


def is_ready(pod):
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def ordinal(name, pod):
    """The StatefulSet ordinal of `<name>-<ordinal>`; Pods not named so sort last."""
    prefix = name + "-"
    suffix = pod[len(prefix):] if pod.startswith(prefix) else ""
    return (0, int(suffix), pod) if suffix.isdigit() else (1, 0, pod)


def choose_primary(name, current, ready):
    """Keep the current primary while it is ready; else the ready Pod with the lowest ordinal."""
    if current in ready:
        return current
    if not ready:
        return None
    return min(ready, key=lambda pod: ordinal(name, pod))


def role_patch(pod, role):
    """A Pod object carrying only the role label: the host applies just these fields."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "labels": {ROLE_LABEL: role}},
    }


def select_primary(service):
    """The client Service, pointed at the primary only."""
    spec = service.setdefault("spec", {})
    selector = spec.get("selector") or {}
    spec["selector"] = {**selector, ROLE_LABEL: "primary"}
    return service


def is_client_service(name, obj):
    return is_kind(obj, "v1", "Service") and (obj.get("metadata") or {}).get("name") == name


def dump(obj):
    return json.dumps(obj, separators=(",", ":"))


def edit_desired(name, desired, pods, primary):
    """Earlier plugins' objects (JSON text; the client Service edited, the rest as they came),
    then a role patch per database Pod, in ordinal order."""
    out = []
    for text in desired:
        obj = json.loads(text)
        out.append(dump(select_primary(obj)) if is_client_service(name, obj) else text)
    for pod in sorted(pods, key=lambda pod: ordinal(name, pod)):
        out.append(dump(role_patch(pod, "primary" if pod == primary else "replica")))
    return out


def election_report(current, primary):
    """The condition and events that tell what happened."""
    if primary is None:
        condition = {
            "kind": "PrimaryElected",
            "status": False,
            "reason": "NoReadyReplica",
            "message": "no database Pod is ready",
        }
        return [condition], []
    condition = {
        "kind": "PrimaryElected",
        "status": True,
        "reason": "Elected",
        "message": f"{primary} is the primary",
    }
    if primary == current:
        events = []
    elif current:
        events = [{"warning": True, "reason": "FailedOver", "message": f"primary moved from {current} to {primary}"}]
    else:
        events = [{"warning": False, "reason": "Elected", "message": f"{primary} is the primary"}]
    return [condition], events


def elect(parent, observed, desired):
    """Decide the primary of `parent` (a dict) from the `observed` objects (dicts).

    `desired` holds earlier plugins' objects as JSON text; those not edited are returned as
    they came.
    """
    name = parent_name(parent)
    current = (parent.get("status") or {}).get("primary")
    current = current if isinstance(current, str) and current else None
    db_pods = database_pods(name, observed)
    pods = [pod_name(pod) for pod in db_pods]
    ready = [pod_name(pod) for pod in db_pods if is_ready(pod)]
    primary = choose_primary(name, current, ready)
    conditions, events = election_report(current, primary)
    return Election(
        primary=primary,
        desired=edit_desired(name, desired, pods, primary),
        conditions=conditions,
        events=events,
        requeue_after_secs=None if primary else REQUEUE_WITHOUT_PRIMARY_SECS,
        log=f"{name}: {len(ready)}/{len(pods)} database Pods ready, primary {primary} (was {current})",
    )
