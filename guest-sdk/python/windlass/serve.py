"""A plugin served natively, outside WebAssembly: `python -m windlass.serve MODULE:CLASS`.

Reads one request per line on stdin and writes one answer per line on stdout, until stdin
ends; before the first, it writes the plugin's info: the WIT `plugin-info` as a JSON object
(`name`, `version`, `parentKinds`, `childKinds`, `readsKinds`, `finalizes`). It is how the host benchmark's native variants (`host/examples/common/sampledb_native.rs`) run a
Python plugin beside its component, to measure what the sandbox costs; nothing in a deployed
host uses it. The plugin runs through `run_json`, as in the component: the same JSON texts in
and out.

A request is the WIT `request` as a JSON object, `{"phase": "reconcile" | "finalize",
"parent": TEXT, "observed": [TEXT], "desired": [TEXT], "config": TEXT, "now": TEXT}`; the
answer is `{"ok": RESPONSE}` with the WIT `response` (`desired`, `status`, `conditions`,
`events`, `requeueAfterSecs`, `finalized`), or `{"err": {"tag": "invalid-parent" |
"invalid-config" | "failed", "val": MESSAGE}}`. The plugin's log lines go to stderr.
"""

import importlib
import json
import sys

from .errors import InvalidConfig, InvalidParent, as_error
from .output import dump
from .plugin import info_of, run_json


def _tag(e) -> str:
    if isinstance(e, InvalidParent):
        return "invalid-parent"
    if isinstance(e, InvalidConfig):
        return "invalid-config"
    return "failed"


def answer(plugin, line: str) -> str:
    """The answer line to one request line."""
    try:
        req = json.loads(line)
        parts = run_json(
            plugin, req["phase"], req["parent"], req["observed"], req["desired"], req["config"], req["now"]
        )
    except Exception as e:  # noqa: BLE001 - every error becomes a plugin-error, as in the component
        e = as_error(e)
        return dump({"err": {"tag": _tag(e), "val": e.message}})
    return dump(
        {
            "ok": {
                "desired": parts.desired,
                "status": parts.status,
                "conditions": [
                    {"kind": c.kind, "status": c.status, "reason": c.reason, "message": c.message}
                    for c in parts.conditions
                ],
                "events": [{"warning": e.warning, "reason": e.reason, "message": e.message} for e in parts.events],
                "requeueAfterSecs": parts.requeue_after_secs,
                "finalized": parts.finalized,
            }
        }
    )


def serve(plugin, lines, out) -> None:
    """Writes the plugin's info, then answers each line of `lines` on `out`, flushing after each."""
    info = info_of(plugin)
    out.write(
        dump(
            {
                "name": info.name,
                "version": info.version,
                "parentKinds": list(info.parents),
                "childKinds": list(info.children),
                "readsKinds": list(info.reads),
                "finalizes": bool(info.finalizes),
            }
        )
        + "\n"
    )
    out.flush()
    for line in lines:
        if line.strip():
            out.write(answer(plugin, line) + "\n")
            out.flush()


def main(argv) -> int:
    if len(argv) != 2 or ":" not in argv[1]:
        print("usage: python -m windlass.serve MODULE:CLASS", file=sys.stderr)
        return 2
    module, name = argv[1].split(":", 1)
    plugin = getattr(importlib.import_module(module), name)
    serve(plugin, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
