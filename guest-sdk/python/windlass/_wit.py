"""The glue between the `windlass:plugin` WIT world (bindings that componentize-py generates at
build time) and the SDK. Imported only by `windlass.export`, so that the rest of the package
imports natively, where `wit_world` does not exist."""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log as wit_log
from wit_world.imports import types

from . import log
from .context import FINALIZE, RECONCILE
from .errors import InvalidConfig, InvalidParent, as_error
from .plugin import info_of, run_json

_LEVELS = (wit_log.Level.DEBUG, wit_log.Level.INFO, wit_log.Level.WARN, wit_log.Level.ERROR)


def _error(e):
    if isinstance(e, InvalidParent):
        return types.PluginError_InvalidParent(e.message)
    if isinstance(e, InvalidConfig):
        return types.PluginError_InvalidConfig(e.message)
    return types.PluginError_Failed(e.message)


def reconciler(plugin):
    """A class implementing the exported `reconciler` interface with `plugin`."""
    log._sink = lambda level, message: wit_log.log(_LEVELS[level], message)

    class Reconciler(exports.Reconciler):
        def info(self) -> types.PluginInfo:
            info = info_of(plugin)
            return types.PluginInfo(
                name=info.name,
                version=info.version,
                parent_kinds=list(info.parents),
                child_kinds=list(info.children),
                reads_kinds=list(info.reads),
                finalizes=bool(info.finalizes),
            )

        def reconcile(self, req: types.Request) -> types.Response:
            phase = FINALIZE if req.phase == types.Phase.FINALIZE else RECONCILE
            try:
                parts = run_json(plugin, phase, req.parent, req.observed, req.desired, req.config, req.now)
            except Exception as e:  # noqa: BLE001 - every error becomes a plugin-error
                raise Err(_error(as_error(e))) from None
            return types.Response(
                desired=parts.desired,
                status=parts.status,
                conditions=[types.Condition(c.kind, c.status, c.reason, c.message) for c in parts.conditions],
                events=[types.Event(e.warning, e.reason, e.message) for e in parts.events],
                requeue_after_secs=parts.requeue_after_secs,
                finalized=parts.finalized,
            )

    Reconciler.__qualname__ = Reconciler.__name__ = "Reconciler"
    return Reconciler
