"""What a plugin returns: the whole desired set and what to report on the parent."""

import copy
import json
from dataclasses import dataclass

from .errors import Failed
from .objects import is_object, kind_of, name_of

U32_MAX = 2**32 - 1


@dataclass
class Condition:
    """A condition to set on the parent (status.conditions)."""

    kind: str  # the condition type, UpperCamelCase
    status: bool
    reason: str  # one UpperCamelCase word
    message: str


@dataclass
class Event:
    """A Kubernetes Event to record on the parent."""

    warning: bool  # a Warning event when true, a Normal one otherwise
    reason: str  # one UpperCamelCase word
    message: str


@dataclass
class Parts:
    """An Output as the WIT `response` carries it: objects and status as JSON text."""

    desired: list
    status: object  # str or None
    conditions: list
    events: list
    requeue_after_secs: object  # int or None
    finalized: bool


def clone(value):
    """A deep copy of a JSON value. Dicts, lists and JSON scalars are copied here, about three
    times faster than `copy.deepcopy` (which a plugin's run paid on every object it applied,
    interpreted inside the sandbox); anything else goes through `copy.deepcopy`, as before."""
    t = type(value)
    if t is dict:
        return {k: clone(v) for k, v in value.items()}
    if t is list:
        return [clone(v) for v in value]
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    return copy.deepcopy(value)


def dump(obj) -> str:
    """Compact JSON, as the host reads it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class Output:
    """The desired set after this plugin, a status fragment, conditions, events, a requeue and,
    in the finalize phase, whether cleanup is done. Start from `ctx.output()`, which holds the
    earlier plugins' desired set: a plugin returns the whole set, not just its own objects."""

    def __init__(self, desired=()):
        #: The whole desired set (dicts): edit, add or drop objects freely.
        self.desired = list(desired)
        #: The status fragment merged into the parent's `.status` (a `None` value deletes a key).
        self.status_fragment = {}
        #: Conditions to set, at most one per kind.
        self.conditions = []
        #: Events to record.
        self.events = []
        self._requeue = None
        self._finalized = False

    # -- the desired set --------------------------------------------------------------------

    def apply(self, obj: dict) -> dict:
        """Adds (a copy of) `obj` to the desired set, replacing the object of the same kind and
        name; returns the copy held. The host fills in namespace, owner reference and labels.
        Failed when the object lacks apiVersion, kind or metadata.name."""
        if not kind_of(obj) or not name_of(obj):
            text = dump(obj) if isinstance(obj, dict) else repr(obj)
            raise Failed(f"a child needs apiVersion, kind and metadata.name: {text[:200]}")
        obj = clone(obj)
        kind, name = kind_of(obj), name_of(obj)
        for i, existing in enumerate(self.desired):
            if is_object(existing, kind, name):
                self.desired[i] = obj
                return obj
        self.desired.append(obj)
        return obj

    def remove(self, kind: str, name: str):
        """Removes the object of `kind` (`group/version/Kind`) and name; returns it, or None."""
        for i, existing in enumerate(self.desired):
            if is_object(existing, kind, name):
                return self.desired.pop(i)
        return None

    def find(self, kind: str, name: str):
        """The desired object of `kind` and name (the one held: edit it in place), or None."""
        return next((o for o in self.desired if is_object(o, kind, name)), None)

    # -- what to report ---------------------------------------------------------------------

    def status(self, key, value=None) -> None:
        """Sets a top-level field of the status fragment, `status("primary", "db-0")`, or merges
        a dict of them, `status({"primary": "db-0", "ready": 3})`."""
        if isinstance(key, dict):
            self.status_fragment.update(key)
        elif isinstance(key, str):
            self.status_fragment[key] = value
        else:
            raise TypeError(f"status key must be a str or a dict, not {type(key).__name__}")

    def condition(self, kind: str, status: bool, reason: str, message: str) -> None:
        """Sets the condition `kind`, replacing an earlier one of that kind."""
        self.conditions = [c for c in self.conditions if c.kind != kind]
        self.conditions.append(Condition(kind, bool(status), reason, str(message)))

    def condition_of(self, kind: str):
        """The condition of a kind, or None."""
        return next((c for c in self.conditions if c.kind == kind), None)

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        """Records an event: Normal, or Warning with `warning=True`."""
        self.events.append(Event(bool(warning), reason, str(message)))

    def requeue_after(self, secs) -> None:
        """Asks to run again after `secs`: seconds, or a `datetime.timedelta` as the Rust and Go
        SDKs take a duration (the earliest request wins; whole seconds reach the host)."""
        if hasattr(secs, "total_seconds"):
            secs = secs.total_seconds()
        secs = int(secs)
        if secs < 0:
            raise ValueError("requeue_after: seconds must not be negative")
        self._requeue = secs if self._requeue is None else min(self._requeue, secs)

    @property
    def requeue(self):
        """The requeue asked for, in seconds, or None."""
        return self._requeue

    def finalized(self, done: bool = True) -> None:
        """Finalize phase: says whether this plugin's cleanup is complete."""
        self._finalized = bool(done)

    @property
    def is_finalized(self) -> bool:
        """Whether the plugin reported its cleanup complete."""
        return self._finalized

    def to_parts(self) -> Parts:
        """The output as JSON text. Failed when an object or the status is not JSON."""
        try:
            desired = [dump(o) for o in self.desired]
            status = dump(self.status_fragment) if self.status_fragment else None
        except (TypeError, ValueError) as e:
            raise Failed(f"output is not JSON: {e}") from None
        return Parts(
            desired=desired,
            status=status,
            conditions=list(self.conditions),
            events=list(self.events),
            requeue_after_secs=None if self._requeue is None else min(self._requeue, U32_MAX),
            finalized=self._finalized,
        )
