#!/usr/bin/env bash
# Builds {{name}} into a WebAssembly component: ./build.sh [OUT.wasm] (default {{name}}.wasm).
#
# 1. go test, natively;
# 2. go build for GOOS=wasip1 GOARCH=wasm as a reactor (-buildmode=c-shared), a core module;
# 3. windlass/componentize.sh: embeds the WIT world windlass:plugin/plugin (wit/plugin.wit) and
#    makes a component with the WASI preview1-to-preview2 reactor adapter: with jco (on PATH, or
#    in the Windlass tools cache) or with wasm-tools on PATH (which needs
#    WASI_ADAPTER=path/to/wasi_snapshot_preview1.reactor.wasm).
set -euo pipefail
out="${1:-}"
if [ -n "$out" ]; then
  case "$out" in /*) ;; *) out="$PWD/$out" ;; esac # relative to where the script was run
fi
cd "$(dirname "$0")"
out="${out:-$PWD/{{name}}.wasm}"

fail() { echo "build.sh: $*" >&2; exit 1; }
command -v go >/dev/null || fail "go is not installed (Go 1.24 or later: https://go.dev/dl/)"
windlass/componentize.sh --check # the component tools, before the tests and the build

echo "==> go test" >&2
go test ./...

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "==> go build (wasip1/wasm, reactor)" >&2
GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-s -o "$tmp/core.wasm" .

echo "==> component" >&2
windlass/componentize.sh "$tmp/core.wasm" wit/plugin.wit "$out"
echo "==> $out ($(wc -c <"$out") bytes)" >&2
