#!/usr/bin/env bash
# Builds a local Kubernetes control plane -- etcd, kube-apiserver and
# kube-controller-manager -- from Go source, through the Go module proxy,
# into a per-version cache outside the repository:
#
#   ${WINDLASS_CACHE:-$HOME/.cache/windlass}/kube/k8s-<ver>-etcd-<ver>/bin/
#
# The versions come from the two pinning modules beside this script
# (k8s/go.mod: k8s.io/kubernetes, etcd/go.mod: go.etcd.io/etcd/server/v3).
#
# If all three binaries are already there, nothing is built. Otherwise they
# are built into a temporary directory next to the cache entry, which is
# renamed into place only when all three are done, so an interrupted build
# never leaves a half-filled entry behind.
#
# stdout: the bin directory, as the last (and only) line, whether it was
# built now or found in the cache. Progress and go's own output go to
# stderr. Exit status is non-zero if the build failed.
#
# Environment:
#   WINDLASS_CACHE      cache root (default $HOME/.cache/windlass)
#   GOMODCACHE, GOCACHE, GOPROXY, GOFLAGS ...  honoured as usual by go
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Read a module's pinned version straight from go.mod (no go command, so the
# cached path is answered in milliseconds even with an empty module cache).
pinned() { # <go.mod> <module path>
    awk -v m="$2" '$1 == "require" { $1 = ""; $0 = $0 }
                   $1 == m && $2 ~ /^v/ { print $2; exit }' "$1"
}
k8s_ver=$(pinned "$here/k8s/go.mod" k8s.io/kubernetes)
etcd_ver=$(pinned "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)
if [[ -z $k8s_ver || -z $etcd_ver ]]; then
    echo "build.sh: could not read the pinned versions from $here/{k8s,etcd}/go.mod" >&2
    exit 1
fi

cache_root=${WINDLASS_CACHE:-$HOME/.cache/windlass}/kube
entry=$cache_root/k8s-${k8s_ver#v}-etcd-${etcd_ver#v}
bins=(etcd kube-apiserver kube-controller-manager)

complete() { # <dir>: all three binaries present and executable
    local b
    for b in "${bins[@]}"; do [[ -x $1/bin/$b ]] || return 1; done
}

if complete "$entry"; then
    echo "$entry/bin"
    exit 0
fi

log() { echo "build.sh: $*" >&2; }

mkdir -p "$cache_root"
# Temp dirs of builds that were SIGKILLed (the trap below could not run).
find "$cache_root" -mindepth 1 -maxdepth 1 -name '.build-*' -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
tmp=$(mktemp -d "$cache_root/.build-k8s-${k8s_ver#v}-etcd-${etcd_ver#v}.XXXXXX")
child=
trap 'rm -rf "$tmp"' EXIT
# go runs in the background and is waited for, so that a SIGTERM/SIGINT sent
# to this script is handled at once (bash defers traps while a foreground
# child runs) and stops go too, instead of leaving it building.
trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; exit 143' TERM
trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; exit 130' INT
run() {
    "$@" &
    child=$!
    wait "$child"
    child=
}
mkdir "$tmp/bin"

# Static binaries, like the released ones; no local paths, debug info or VCS
# stamp (this repo's commit would otherwise end up in them).
export CGO_ENABLED=0

# Version stamp for the Kubernetes binaries, the way Kubernetes' own
# hack/lib/version.sh does it: --version and the apiserver's /version (which
# clients such as kubectl and client-go's discovery read) report these.
# The module proxy does not tell the release commit, so gitCommit is left
# empty rather than showing the "$Format:%H$" placeholder; buildDate is the
# release's module time, which keeps the build reproducible.
k8s_minor=${k8s_ver#v}; k8s_minor=${k8s_minor#*.}; k8s_minor=${k8s_minor%%.*}
k8s_major=${k8s_ver#v}; k8s_major=${k8s_major%%.*}
build_date=$(go -C "$here/k8s" list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_ver"
    ldflags+=" -X $pkg.gitMajor=$k8s_major"
    ldflags+=" -X $pkg.gitMinor=$k8s_minor"
    ldflags+=" -X $pkg.gitCommit="
    ldflags+=" -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.buildDate=$build_date"
done

start=$SECONDS
log "building etcd $etcd_ver"
run go -C "$here/etcd" build -trimpath -buildvcs=false -ldflags="-s -w" -o "$tmp/bin/etcd" .
for cmd in kube-apiserver kube-controller-manager; do
    log "building $cmd $k8s_ver ($((SECONDS - start))s so far)"
    run go -C "$here/k8s" build -trimpath -buildvcs=false -ldflags="$ldflags" -o "$tmp/bin/$cmd" "k8s.io/kubernetes/cmd/$cmd"
done
log "built in $((SECONDS - start))s"

{
    echo "kubernetes $k8s_ver"
    echo "etcd $etcd_ver"
    go version
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$tmp/VERSIONS"

complete "$tmp" || { log "internal error: a binary is missing in $tmp/bin"; exit 1; }
chmod 755 "$tmp"  # mktemp made it 0700

# An entry that exists but is incomplete (someone deleted a binary) is
# replaced. rename(2) onto a non-empty directory fails, so if another
# build.sh finished first, keep its result and drop ours.
if [[ -e $entry ]] && ! complete "$entry"; then
    rm -rf "$entry"
fi
if ! mv -T "$tmp" "$entry" 2>/dev/null; then
    complete "$entry" || { log "could not move the build into $entry"; exit 1; }
fi
echo "$entry/bin"
