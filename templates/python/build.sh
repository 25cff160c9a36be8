#!/usr/bin/env bash
# Tests and builds the {{name}} plugin into a WebAssembly component: ./build.sh [OUT.wasm]
# (default {{name}}.wasm). Runs the unit tests (test_plugin.py), then componentize-py packages
# app.py, plugin.py and the SDK (windlass/) with a Python interpreter, generating the bindings
# of wit/ (world `plugin`) as it builds. Needs componentize-py 0.25.1 and, for the tests, a
# Python with PyYAML.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/{{name}}.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
tools="${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}/python/bin"

componentize_py="$(command -v componentize-py || true)"
[ -n "$componentize_py" ] || componentize_py="$tools/componentize-py"
if ! [ -x "$componentize_py" ]; then
    echo "build.sh: componentize-py not found; pip install componentize-py==0.25.1" >&2
    exit 1
fi
python=""
for candidate in "$(command -v python3 || true)" "$tools/python"; do
    if [ -n "$candidate" ] && "$candidate" -c 'import yaml' 2>/dev/null; then
        python="$candidate"
        break
    fi
done
if [ -z "$python" ]; then
    echo "build.sh: no Python with PyYAML for the tests; pip install pyyaml" >&2
    exit 1
fi

cd "$here"
PYTHONDONTWRITEBYTECODE=1 "$python" -m unittest --quiet -b test_plugin
# Only the plugin's modules and the SDK go into the component, not tests or caches.
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp app.py plugin.py "$stage/"
mkdir "$stage/windlass"
cp windlass/*.py "$stage/windlass/"
mkdir -p "$(dirname "$out")"
"$componentize_py" -d wit -w plugin componentize -p "$stage" app -o "$out" >/dev/null
echo "built $out ($(stat -c %s "$out") bytes)"
