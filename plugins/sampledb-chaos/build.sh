#!/usr/bin/env bash
# Builds the sampledb-chaos plugin into a WebAssembly component: build.sh OUT.wasm
# Runs the unit tests first (test.sh), then builds the Go module for GOOS=wasip1 GOARCH=wasm as a
# reactor (-buildmode=c-shared) and makes the component of the WIT world `plugin` (wit/plugin.wit)
# with the Go SDK's componentize.sh (jco's reactor adapter, or wasm-tools with WASI_ADAPTER).
set -euo pipefail
out="${1:?usage: build.sh OUT.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
command -v go >/dev/null || { echo "build.sh: go is not installed (Go 1.24 or later: https://go.dev/dl/)" >&2; exit 1; }
componentize="$root/guest-sdk/go/componentize.sh"
"$componentize" --check # the component tools, before the tests and the build

bash "$here/test.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-s -o "$tmp/core.wasm" .
"$componentize" "$tmp/core.wasm" "$root/wit/plugin.wit" "$out"
echo "built $out ($(stat -c %s "$out") bytes)"
