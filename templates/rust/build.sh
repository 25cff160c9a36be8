#!/usr/bin/env bash
# Tests and builds the {{name}} plugin into a WebAssembly component: ./build.sh [OUT.wasm]
# (default {{name}}.wasm). Needs Rust with the wasm32-wasip2 target
# (`rustup target add wasm32-wasip2`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/{{name}}.wasm}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cd "$here"
cargo test --quiet
cargo build --quiet --release --target wasm32-wasip2
target="${CARGO_TARGET_DIR:-$here/target}"
cp "$target/wasm32-wasip2/release/{{module}}.wasm" "$out"
echo "built $out ($(stat -c %s "$out") bytes)"
