#!/usr/bin/env bash
# Builds a plugin written with the Windlass JavaScript SDK into a WebAssembly component:
#   componentize.sh ENTRY.js OUT.wasm WIT_DIR
# ENTRY.js exports `reconciler` (windlass.plugin({...})); WIT_DIR holds plugin.wit.
#
# # Why a staging directory
# jco's QuickJS backend (componentize-qjs) resolves imports only below the entry's directory and
# resolves a relative entry path from that directory, not from the working directory. So the
# entry's directory and this SDK's directory are copied into a temporary directory at their
# relative places (the plugin's `import ... from "../../guest-sdk/js/windlass.js"` still
# resolves), next to a generated entry that loads component.js (the `log` import) first and
# re-exports the plugin's `reconciler`.
#
# jco: $JCO, else `jco` on PATH, else the Windlass tools cache
# (${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}/npm/bin/jco). The non-async
# QuickJS runtime is used: the host does not enable the component model's async ABI.
set -euo pipefail
entry="${1:?usage: componentize.sh ENTRY.js OUT.wasm WIT_DIR}"
out="${2:?usage: componentize.sh ENTRY.js OUT.wasm WIT_DIR}"
wit="${3:?usage: componentize.sh ENTRY.js OUT.wasm WIT_DIR}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
entry="$(cd "$(dirname "$entry")" && pwd)/$(basename "$entry")"
wit="$(cd "$wit" && pwd)"
sdk="$(cd "$(dirname "$0")" && pwd)"

jco="${JCO:-}"
if [ -z "$jco" ]; then
    if command -v jco >/dev/null; then
        jco="$(command -v jco)"
    else
        jco="${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}/npm/bin/jco"
    fi
fi
if ! [ -x "$jco" ] && ! command -v "$jco" >/dev/null; then
    echo "componentize.sh: jco not found; install it: npm install -g @bytecodealliance/jco@1.35.0" >&2
    exit 1
fi

# The closest directory holding both the plugin and the SDK.
src="$(dirname "$entry")"
common="$src"
while [ "$common" != / ] && [ "${sdk#"$common"/}" = "$sdk" ] && [ "$sdk" != "$common" ]; do
    common="$(dirname "$common")"
done
rel() { local p="${1#"$common"}"; echo "${p#/}"; }

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
copy() { # DIR: its files (no dependencies, VCS data or components) to the same place in $stage
    local to="$stage/$(rel "$1")"
    mkdir -p "$to"
    tar -C "$1" --exclude=node_modules --exclude=.git --exclude='*.wasm' -cf - . | tar -C "$to" -xf -
}
copy "$src"
case "$sdk/" in "$src"/*) ;; *) copy "$sdk" ;; esac

sdk_rel="$(rel "$sdk")"
cat >"$stage/__windlass_component.js" <<EOF
import "./${sdk_rel:+$sdk_rel/}component.js";
export { reconciler } from "./$(rel "$entry")";
EOF

mkdir -p "$(dirname "$out")"
(cd "$stage" && "$jco" componentize __windlass_component.js --backend qjs \
    --backend-qjs-disable-async --wit "$wit" --world-name plugin -o "$out" >/dev/null)
