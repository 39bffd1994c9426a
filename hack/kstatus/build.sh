#!/usr/bin/env bash
# Build hack/kstatus (sigs.k8s.io/cli-utils' kstatus, the library Flux waits with) and print the binary's path.
#
#   hack/kstatus/build.sh
#
# Cached outside the repository like hack/build-binaries.sh does: $QF_CACHE/kstatus/<cli-utils version>-<hash of
# the program's sources>/bin/kstatus, rebuilt only when the pinned version or the program changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
QF_CACHE=${QF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-fleet}
version=$(sed -n 's#^[[:space:]]*sigs\.k8s\.io/cli-utils \(v[^ ]*\).*#\1#p' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no sigs.k8s.io/cli-utils version in $here/go.mod" >&2; exit 1; }
sources=$(cat "$here/main.go" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
out="$QF_CACHE/kstatus/$version-$sources/bin"
if [ ! -x "$out/kstatus" ]; then
  echo "[kstatus] building against sigs.k8s.io/cli-utils $version" >&2
  mkdir -p "$out"
  # -mod=readonly: go.sum is committed, so the build is reproducible and fails rather than re-resolving.
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly \
    go build -trimpath -ldflags "-s -w" -o "$out/kstatus.tmp" .)
  mv "$out/kstatus.tmp" "$out/kstatus"
fi
echo "$out/kstatus"
