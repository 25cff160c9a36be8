#!/usr/bin/env bash
# Tests and builds the {{name}} plugin into a WebAssembly component: ./build.sh [OUT.wasm]
# (default {{name}}.wasm). Needs Node.js and jco (on PATH, or in the Windlass tools cache;
# else `npm install -g @bytecodealliance/jco@1.35.0`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/{{name}}.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cd "$here"
node --test --test-reporter=dot
windlass/componentize.sh plugin.js "$out" wit
echo "built $out ($(stat -c %s "$out") bytes)"
