"""What the host gave a plugin for one run, as plain dicts."""

import json

from .errors import Failed, InvalidConfig, InvalidParent
from .objects import is_object, kind_of
from .output import Output, clone

RECONCILE = "reconcile"
FINALIZE = "finalize"


class Context:
    """Everything the host gave a plugin for one run.

    The parent, observed and desired objects are plain dicts as the host sent them (JSON).
    Treat them as read-only: edit the desired set through `output()`.
    """

    def __init__(self, phase=RECONCILE, parent=None, observed=(), desired=(), config=None, now="2026-01-01T00:00:00Z"):
        if phase not in (RECONCILE, FINALIZE):
            raise ValueError(f"phase must be {RECONCILE!r} or {FINALIZE!r}, not {phase!r}")
        if not isinstance(parent, dict):
            raise InvalidParent("not a JSON object")
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise InvalidConfig("not a JSON object")
        #: "reconcile" or "finalize".
        self.phase = phase
        #: The parent custom resource.
        self.parent = parent
        #: Every observed object: the parent's children and the kinds the plugin reads.
        self.observed = list(observed)
        #: What earlier plugins of the pipeline want.
        self.desired = list(desired)
        #: This plugin's config from its WasmPlugin (`{}` when none).
        self.config = config
        #: The time of this run (RFC 3339), given by the host.
        self.now = now

    @classmethod
    def from_json(cls, phase, parent: str, observed, desired, config: str, now: str) -> "Context":
        """A context from the JSON texts the host sends.

        Raises InvalidParent for an unreadable parent, InvalidConfig for an unreadable config,
        Failed for unreadable observed or desired objects (as the Rust SDK does).
        """
        try:
            parent = json.loads(parent)
        except ValueError as e:
            raise InvalidParent(f"not valid JSON: {e}") from None

        def parse_all(texts, what):
            out = []
            for i, text in enumerate(texts):
                try:
                    out.append(json.loads(text))
                except ValueError as e:
                    raise Failed(f"{what}[{i}] is not valid JSON: {e}") from None
            return out

        if config.strip():
            try:
                config = json.loads(config)
            except ValueError as e:
                raise InvalidConfig(f"not valid JSON: {e}") from None
        else:
            config = {}
        return cls(phase, parent, parse_all(observed, "observed"), parse_all(desired, "desired"), config, now)

    @property
    def metadata(self) -> dict:
        """The parent's metadata ({} when absent)."""
        meta = self.parent.get("metadata")
        return meta if isinstance(meta, dict) else {}

    def _meta_str(self, field):
        value = self.metadata.get(field)
        return value if isinstance(value, str) else None

    @property
    def name(self) -> str:
        """The parent's metadata.name ("" when absent)."""
        return self._meta_str("name") or ""

    @property
    def namespace(self):
        """The parent's namespace; None for a cluster-scoped parent."""
        return self._meta_str("namespace")

    @property
    def uid(self) -> str:
        """The parent's metadata.uid ("" when absent)."""
        return self._meta_str("uid") or ""

    @property
    def generation(self) -> int:
        """The parent's metadata.generation (0 when absent)."""
        value = self.metadata.get("generation")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def label(self, key: str):
        """A label of the parent, or None."""
        labels = self.metadata.get("labels")
        value = labels.get(key) if isinstance(labels, dict) else None
        return value if isinstance(value, str) else None

    @property
    def spec(self) -> dict:
        """The parent's spec ({} when absent). InvalidParent when it is not an object."""
        spec = self.parent.get("spec")
        if spec is None:
            return {}
        if not isinstance(spec, dict):
            raise InvalidParent("spec: must be an object")
        return spec

    @property
    def status(self) -> dict:
        """The parent's current status as the host last read it ({} when absent)."""
        status = self.parent.get("status")
        return status if isinstance(status, dict) else {}

    def observed_of(self, kind: str) -> list:
        """Observed objects of one kind (`group/version/Kind`, `v1/Kind` for core)."""
        return [o for o in self.observed if kind_of(o) == kind]

    def find_observed(self, kind: str, name: str):
        """The observed object of `kind` with this name, or None."""
        return next((o for o in self.observed if is_object(o, kind, name)), None)

    def output(self):
        """An Output holding (a copy of) the earlier plugins' desired set, ready to add to."""
        return Output(clone(self.desired))
