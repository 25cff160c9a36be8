#!/usr/bin/env bash
# Builds the real `cosign` (Sigstore) from its Go module, through the Go module
# proxy, into a per-version cache outside the repository:
#
#   ${WINDLASS_CACHE:-$HOME/.cache/windlass}/cosign/<version>/cosign
#
# host/tests/host/signature.rs checks with it that Windlass and cosign each
# verify what the other signed. v2 is pinned: it stores signatures as the
# `sha256-<digest>.sig` image Windlass reads and writes (v3 defaults to the
# newer bundle format).
#
# If the binary is already there, nothing is built; otherwise it is built into
# a temporary directory beside the entry and renamed into place when done.
#
# stdout: the binary's path, as the last (and only) line. go's output goes to
# stderr. Exit status is non-zero if the build failed.
#
# Environment:
#   WINDLASS_CACHE      cache root (default $HOME/.cache/windlass)
#   GOMODCACHE, GOCACHE, GOPROXY, GOFLAGS ...  honoured as usual by go
set -euo pipefail

version=v2.6.5
cache_root=${WINDLASS_CACHE:-$HOME/.cache/windlass}/cosign
entry=$cache_root/$version

if [[ -x $entry/cosign ]]; then
    echo "$entry/cosign"
    exit 0
fi

mkdir -p "$cache_root"
tmp=$(mktemp -d "$cache_root/.build-$version.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "build.sh: building cosign $version" >&2
CGO_ENABLED=0 GOBIN=$tmp go install -trimpath -ldflags="-s -w" \
    "github.com/sigstore/cosign/v2/cmd/cosign@$version" >&2
echo "build.sh: built cosign in $((SECONDS - start))s" >&2
chmod 755 "$tmp"
if ! mv -T "$tmp" "$entry" 2>/dev/null; then
    [[ -x $entry/cosign ]] || { echo "build.sh: could not move the build into $entry" >&2; exit 1; }
fi
echo "$entry/cosign"
