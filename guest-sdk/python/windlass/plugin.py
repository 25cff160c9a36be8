"""A plugin's declaration (Info), its base class (Plugin), and one run of it on the host's JSON."""

from dataclasses import dataclass, field

from .context import FINALIZE, RECONCILE, Context
from .errors import Failed, as_error
from .output import Output, Parts


@dataclass
class Info:
    """What a plugin declares about itself; the host refuses output beyond it.

    Kinds are `group/version/Kind`, `v1/Kind` for core ones.
    """

    name: str  # a short DNS-1123 label
    version: str  # semver
    parents: list = field(default_factory=list)  # the parent kinds it reconciles
    children: list = field(default_factory=list)  # the kinds it produces
    reads: list = field(default_factory=list)  # further kinds it observes without producing
    finalizes: bool = False  # whether it has cleanup to do when the parent is deleted

    def __post_init__(self):
        for what in ("parents", "children", "reads"):
            kinds = getattr(self, what)
            if isinstance(kinds, str):
                raise TypeError(f"Info.{what} is a list of kinds, not a str: [{kinds!r}]")
            setattr(self, what, list(kinds))


class Plugin:
    """Reconcile logic for one concern of an operator. Subclass it:

        class Greeter(windlass.Plugin):
            def info(self):
                return windlass.Info("greeter", "0.1.0", parents=[...], children=["v1/ConfigMap"])

            def reconcile(self, ctx):
                out = ctx.output()
                ...
                return out

    The SDK makes one instance (no arguments) and calls it for every run. Raise
    InvalidParent, InvalidConfig or Failed to refuse; any other exception becomes Failed.
    """

    def info(self) -> Info:
        """Describes the plugin. Must not depend on any input."""
        raise NotImplementedError(f"{type(self).__name__}.info")

    def reconcile(self, ctx: Context) -> Output:
        """Computes what should exist for the parent."""
        raise NotImplementedError(f"{type(self).__name__}.reconcile")

    def finalize(self, ctx: Context) -> Output:
        """Cleans up when the parent is being deleted; report `out.finalized()` when done.
        The default has nothing to clean up: the desired set unchanged, finalized."""
        out = ctx.output()
        out.finalized()
        return out


def instance(plugin) -> Plugin:
    """`plugin` (a Plugin subclass or instance) as an instance."""
    obj = plugin() if isinstance(plugin, type) else plugin
    if not isinstance(obj, Plugin):
        raise TypeError(f"{plugin!r} is not a windlass.Plugin")
    return obj


def info_of(plugin) -> Info:
    """The plugin's Info, checked."""
    info = instance(plugin).info()
    if not isinstance(info, Info):
        raise TypeError(f"{type(plugin).__name__}.info() returned {type(info).__name__}, not windlass.Info")
    return info


def run(plugin, ctx: Context) -> Output:
    """Runs the plugin's phase on `ctx`. Raises a windlass error (any other exception becomes
    Failed, as in the component)."""
    obj = instance(plugin)
    try:
        out = obj.finalize(ctx) if ctx.phase == FINALIZE else obj.reconcile(ctx)
    except Exception as e:  # noqa: BLE001 - the host retries; the message says what broke
        raise as_error(e) from e
    if not isinstance(out, Output):
        raise Failed(f"{type(obj).__name__}.{ctx.phase} returned {type(out).__name__}, not windlass.Output")
    return out


def run_json(plugin, phase: str, parent: str, observed, desired, config: str, now: str) -> Parts:
    """Runs the plugin on the JSON texts the host sends, exactly as the component does: parse,
    run, serialize. Raises a windlass error."""
    if phase not in (RECONCILE, FINALIZE):
        raise Failed(f"unknown phase {phase!r}")
    try:
        ctx = Context.from_json(phase, parent, observed, desired, config, now)
        return run(plugin, ctx).to_parts()
    except Exception as e:  # noqa: BLE001
        raise as_error(e) from e
