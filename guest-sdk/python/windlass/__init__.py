"""Write Windlass plugins (Kubernetes reconcile logic as WebAssembly components) in Python.

A plugin is a subclass of `Plugin` whose `reconcile(ctx)` works on plain dicts: the parent
custom resource, what the host observed, and what earlier plugins of the pipeline want. It
returns an `Output`: the whole desired set, a status fragment, conditions and events. The SDK
owns all of the JSON and WIT mapping; the host applies nothing before checking it.

    # greeter.py: the logic, importable natively by the unit tests
    import windlass

    class Greeter(windlass.Plugin):
        def info(self):
            return windlass.Info("greeter", "0.1.0",
                                 parents=["example.com/v1/Greeting"], children=["v1/ConfigMap"])

        def reconcile(self, ctx):
            greeting = ctx.spec.get("greeting")
            if not isinstance(greeting, str):
                raise windlass.InvalidParent("spec.greeting: must be a string")
            out = ctx.output()  # the earlier plugins' desired set
            out.apply({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": f"{ctx.name}-greeting"},
                       "data": {"greeting": greeting}})
            out.status("published", True)
            return out

    # app.py: the component's entry module (`componentize-py ... componentize app`)
    import windlass
    from greeter import Greeter

    Reconciler = windlass.export(Greeter)

    # test_greeter.py: unit tests run natively, without a wasm runtime
    from windlass.testing import Harness
    out = Harness.from_yaml("apiVersion: example.com/v1\\nkind: Greeting\\n"
                            "metadata: {name: hi}\\nspec: {greeting: hello}").run(Greeter)
    assert out.find("v1/ConfigMap", "hi-greeting")["data"] == {"greeting": "hello"}

# The one way to write a plugin
Subclass `Plugin`: `info()` returns an `Info`, `reconcile(ctx)` returns an `Output` (start from
`ctx.output()`), and `finalize(ctx)` (optional) cleans up when the parent is deleted; its default
returns the desired set unchanged with `finalized` set. The SDK creates an instance with no
arguments for every run. Kinds are `group/version/Kind` (`v1/Kind` for core ones).

# Errors
Raise `InvalidParent` (the spec is wrong: name the field), `InvalidConfig` (name the key) or
`Failed` (anything else; the host retries with backoff). Any other exception becomes `failed`
with `TypeName: message`.

# Building
componentize-py generates the `wit_world` bindings from `wit/` (world `plugin`) at build time;
the entry module must bind the class `Reconciler`, which `export` makes. Only `export` imports
the bindings, so everything else here imports natively (stdlib only; `windlass.testing` needs
PyYAML for its YAML fixtures).
"""

from . import log
from .context import FINALIZE, RECONCILE, Context
from .errors import Error, Failed, InvalidConfig, InvalidParent
from .objects import kind_of, name_of
from .output import Condition, Event, Output
from .plugin import Info, Plugin

__all__ = [
    "FINALIZE",
    "RECONCILE",
    "Condition",
    "Context",
    "Error",
    "Event",
    "Failed",
    "Info",
    "InvalidConfig",
    "InvalidParent",
    "Output",
    "Plugin",
    "export",
    "kind_of",
    "log",
    "name_of",
]


def export(plugin):
    """The class componentize-py exports as `windlass:plugin/reconciler`, running `plugin` (a
    `Plugin` subclass). Bind it to the name `Reconciler` in the component's entry module:
    `Reconciler = windlass.export(MyPlugin)`. Only works inside the component build, where the
    `wit_world` bindings exist."""
    from .plugin import info_of

    info_of(plugin)  # a class that is no Plugin, or a bad Info, fails the build, not a run
    from ._wit import reconciler

    return reconciler(plugin)
