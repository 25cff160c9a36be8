#!/usr/bin/env bash
# Makes a WebAssembly component of a Go plugin's core module:
#   componentize.sh CORE.wasm WIT_FILE OUT.wasm
#   componentize.sh --check     (only checks that the tools are there: build.sh runs it first,
#                                so a missing tool fails before the tests and the Go build)
# CORE.wasm is the WASI preview 1 reactor `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`
# made; WIT_FILE is wit/plugin.wit (world `plugin`). It embeds the WIT world and adapts the module
# to a component with the WASI preview1-to-preview2 reactor adapter:
# - with jco (on PATH, or in the Windlass tools cache
#   ${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}/npm/bin/jco), through its
#   library API;
# - or with wasm-tools on PATH, which needs WASI_ADAPTER=path/to/wasi_snapshot_preview1.reactor.wasm.
set -euo pipefail
fail() { echo "componentize.sh: $*" >&2; exit 1; }
usage="usage: componentize.sh CORE.wasm WIT_FILE OUT.wasm"
check=""
if [ "${1:-}" = "--check" ]; then
  check=1
else
  core="${1:?$usage}"
  wit="${2:?$usage}"
  out="${3:?$usage}"
  [ -f "$core" ] || fail "$core: no such core module"
  [ -f "$wit" ] || fail "$wit: no such WIT file"
fi

tools="${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}"
jco=""
if command -v jco >/dev/null; then
  jco="$(command -v jco)"
elif [ -x "$tools/npm/bin/jco" ]; then
  jco="$tools/npm/bin/jco"
fi
if [ -z "$jco" ] && ! command -v wasm-tools >/dev/null; then
  fail "neither jco nor wasm-tools found: install jco with 'npm install -g @bytecodealliance/jco' (needs Node.js), or put wasm-tools on PATH and set WASI_ADAPTER to a wasi_snapshot_preview1.reactor.wasm"
fi
if [ -n "$jco" ]; then
  command -v node >/dev/null || fail "jco needs node on PATH"
else
  [ -n "${WASI_ADAPTER:-}" ] || fail "wasm-tools needs WASI_ADAPTER=path/to/wasi_snapshot_preview1.reactor.wasm (from a wasmtime release or the wasi-preview1-component-adapter-provider crate)"
fi
[ -z "$check" ] || exit 0

mkdir -p "$(dirname "$out")"
if [ -n "$jco" ]; then
  # jco's library API, not `jco embed`: the CLI of jco 1.35 cannot read a WIT file (its WASI
  # shim has no preopened directories), so the WIT text is passed in directly.
  jcoroot="$(cd "$(dirname "$(readlink -f "$jco")")/.." && pwd)"
  JCO_ROOT="$jcoroot" node --input-type=module - "$core" "$wit" "$out" <<'JS'
import { readFile, writeFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";
const jco = await import(pathToFileURL(process.env.JCO_ROOT + "/dist/api.js").href);
const [core, wit, out] = process.argv.slice(2);
const embedded = await jco.componentEmbed({
  binary: await readFile(core),
  witSource: await readFile(wit, "utf8"),
  world: "plugin",
});
const adapter = await readFile(jco.preview1AdapterReactorPath());
await writeFile(out, await jco.componentNew(embedded, [["wasi_snapshot_preview1", adapter]]));
JS
else
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  wasm-tools component embed "$wit" --world plugin "$core" -o "$tmp/embedded.wasm"
  wasm-tools component new "$tmp/embedded.wasm" --adapt "wasi_snapshot_preview1=$WASI_ADAPTER" -o "$out"
fi
