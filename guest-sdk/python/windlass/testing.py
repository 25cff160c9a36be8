"""Run a plugin natively on fixtures, without a wasm runtime: fast unit tests.

    from windlass.testing import Harness

    out = (Harness.from_yaml(PARENT_YAML)
           .observed_yaml(PODS_YAML)
           .config({"replicas": 3})
           .run(MyPlugin))
    assert out.condition_of("Ready").status

The harness does what the host does around a run: the inputs and the output cross as JSON (so
an output that is not JSON fails here too), and the plugin sees only the observed objects of the
kinds its Info declares (children and reads). The host's own checks (namespaces, owner
references, declared child kinds) are the conformance tests' business.

YAML fixtures need PyYAML; they are read as the host reads them (YAML 1.2 scalars: timestamps
and `yes`/`no` stay strings) and a `kind: List` is flattened.
"""

import copy
import json

from .context import FINALIZE, RECONCILE, Context
from .objects import kind_of
from .plugin import info_of, run
from .output import Output

DEFAULT_NOW = "2026-01-01T00:00:00Z"


def _loader():
    import re

    import yaml  # PyYAML, for fixtures only; the component never imports it

    class Loader(yaml.SafeLoader):
        """SafeLoader with YAML 1.2 core-schema booleans and no timestamps, like serde_yaml."""

    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    return yaml, Loader


def yaml_docs(text: str) -> list:
    """The objects of one or more YAML documents (`---`-separated); empty documents are
    skipped and a `kind: List` is flattened into its items."""
    yaml, loader = _loader()
    out = []
    for doc in yaml.load_all(text, Loader=loader):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        else:
            out.append(doc)
    return out


def _objects(objects) -> list:
    if isinstance(objects, dict):
        return [objects]
    return list(objects)


class Harness:
    """A parent, observed objects, earlier plugins' desired set and config, for one run. The
    setters return the harness, so a fixture reads as one expression."""

    def __init__(self, parent: dict):
        self._phase = RECONCILE
        self._parent = copy.deepcopy(parent)
        self._observed = []
        self._desired = []
        self._config = {}
        self._now = DEFAULT_NOW

    @classmethod
    def from_yaml(cls, parent: str) -> "Harness":
        """A harness for the parent given as YAML (exactly one document)."""
        docs = yaml_docs(parent)
        if len(docs) != 1:
            raise ValueError(f"the parent fixture must be one YAML document, not {len(docs)}")
        return cls(docs[0])

    def observed(self, objects) -> "Harness":
        """Adds observed objects (a dict or a list of them)."""
        self._observed.extend(copy.deepcopy(_objects(objects)))
        return self

    def observed_yaml(self, text: str) -> "Harness":
        """Adds observed objects given as YAML (one or more documents)."""
        return self.observed(yaml_docs(text))

    def desired(self, objects) -> "Harness":
        """Sets the desired set earlier plugins produced (a dict or a list of them)."""
        self._desired = copy.deepcopy(_objects(objects))
        return self

    def desired_yaml(self, text: str) -> "Harness":
        """Sets the earlier plugins' desired set, given as YAML."""
        return self.desired(yaml_docs(text))

    def config(self, config: dict) -> "Harness":
        """Sets the plugin's config."""
        self._config = copy.deepcopy(config)
        return self

    def config_yaml(self, text: str) -> "Harness":
        """Sets the plugin's config, given as YAML (one document)."""
        docs = yaml_docs(text)
        return self.config(docs[0] if docs else {})

    def now(self, now: str) -> "Harness":
        """Sets the time of the run (RFC 3339)."""
        self._now = now
        return self

    def phase(self, phase: str) -> "Harness":
        """Runs `"reconcile"` (the default) or `"finalize"`."""
        if phase not in (RECONCILE, FINALIZE):
            raise ValueError(f"phase must be {RECONCILE!r} or {FINALIZE!r}, not {phase!r}")
        self._phase = phase
        return self

    def finalizing(self) -> "Harness":
        """Runs the finalize phase."""
        return self.phase(FINALIZE)

    def with_parent(self, edit) -> "Harness":
        """Edits the parent in place with `edit(parent)`, e.g. to set one field for one test."""
        edit(self._parent)
        return self

    def context(self, plugin=None) -> Context:
        """The context the plugin will see: the inputs after a JSON round trip, the observed
        objects only of the kinds `plugin` declares (all of them without a plugin)."""
        observed = self._observed
        if plugin is not None:
            info = info_of(plugin)
            kinds = set(info.children) | set(info.reads)
            observed = [o for o in observed if kind_of(o) in kinds]
        return Context.from_json(
            self._phase,
            json.dumps(self._parent),
            [json.dumps(o) for o in observed],
            [json.dumps(o) for o in self._desired],
            json.dumps(self._config),
            self._now,
        )

    def run(self, plugin) -> Output:
        """Runs the plugin's phase (`plugin` is a Plugin subclass or instance). Returns its
        Output, checked to serialize as the component would; raises the windlass error the
        component would return."""
        out = run(plugin, self.context(plugin))
        out.to_parts()
        return out
