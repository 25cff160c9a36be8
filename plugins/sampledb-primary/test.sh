#!/usr/bin/env bash
# Unit tests of the plugin, natively through the Python SDK's harness (no WebAssembly needed),
# including every conformance case in host/tests/cases/primary/. They need PyYAML: the tools
# venv has it (.ci/tools-plugins installs it when missing).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}/python/bin/python"
"$python" -c 'import yaml' 2>/dev/null || bash "$root/.ci/tools-plugins"
cd "$here"
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$root/guest-sdk/python" "$python" -m unittest -b ${VERBOSE:+-v} "${@:-test_primary}"
