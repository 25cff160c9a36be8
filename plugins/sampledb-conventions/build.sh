#!/usr/bin/env bash
# Builds the sampledb-conventions plugin into a WebAssembly component: build.sh OUT.wasm
# Runs the unit tests first, then packages conventions.js (and transform.js, which it imports)
# with jco's QuickJS backend (componentize-qjs) from the tools cache, which .ci/tools-plugins
# fills when it is missing. The bindings are generated from wit/ (world `plugin`) during the
# build and not kept. The non-async runtime is used: the host does not enable the component
# model's async ABI.
set -euo pipefail
out="${1:?usage: build.sh OUT.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}"
jco="$tools/npm/bin/jco"
[ -x "$jco" ] || "$root/.ci/tools-plugins"

cd "$here"
node --test --test-reporter=dot transform.test.js
mkdir -p "$(dirname "$out")"
"$jco" componentize conventions.js --backend qjs --backend-qjs-disable-async \
    --wit "$root/wit" --world-name plugin -o "$out" >/dev/null
echo "built $out ($(stat -c %s "$out") bytes)"
