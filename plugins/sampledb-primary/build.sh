#!/usr/bin/env bash
# Builds the sampledb-primary plugin into a WebAssembly component: build.sh OUT.wasm
# Runs the unit tests first (test.sh), then packages app.py and primary.py with the Python SDK
# (guest-sdk/python/windlass) using componentize-py from the tools cache (.ci/tools-plugins
# fills it when it is missing), which generates the bindings of wit/ (world `plugin`) as it
# builds. Only the plugin's own modules and the SDK are bundled (staged in a temporary
# directory), so tests and caches never end up in the component.
# For an editor, `componentize-py -d ../../wit -w plugin bindings bindings` writes the bindings
# into bindings/ (ignored by git); add ../../guest-sdk/python to the editor's Python path.
set -euo pipefail
out="${1:?usage: build.sh OUT.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}"
componentize_py="$tools/python/bin/componentize-py"
[ -x "$componentize_py" ] || bash "$root/.ci/tools-plugins"

bash "$here/test.sh"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$here/app.py" "$here/primary.py" "$stage/"
mkdir "$stage/windlass"
cp "$root"/guest-sdk/python/windlass/*.py "$stage/windlass/"
mkdir -p "$(dirname "$out")"
"$componentize_py" -d "$root/wit" -w plugin componentize -p "$stage" app -o "$out" >/dev/null
echo "built $out ($(stat -c %s "$out") bytes)"
