#!/usr/bin/env bash
# Builds the sampledb-conventions plugin into a WebAssembly component: build.sh OUT.wasm
# Runs the tests first (test.sh), then packages conventions.js with the Windlass JavaScript SDK
# (guest-sdk/js/componentize.sh: jco's QuickJS backend, componentize-qjs) using jco from the
# tools cache, which .ci/tools-plugins fills when it is missing. The bindings are generated from
# wit/ (world `plugin`) during the build and not kept.
set -euo pipefail
out="${1:?usage: build.sh OUT.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}"
jco="$tools/npm/bin/jco"
[ -x "$jco" ] || "$root/.ci/tools-plugins"

"$here/test.sh" --test-reporter=dot
JCO="$jco" "$root/guest-sdk/js/componentize.sh" "$here/conventions.js" "$out" "$root/wit"
echo "built $out ($(stat -c %s "$out") bytes)"
