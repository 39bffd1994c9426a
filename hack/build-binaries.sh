#!/usr/bin/env bash
# Build the real control-plane binaries from the Go module proxy, pinned, cached outside the repository.
#
#   hack/build-binaries.sh [component...]    components: k8s etcd kwok helm (default: all)
#
# Each component lands in $QF_CACHE/<component>/<version>/bin and is rebuilt only when a binary is missing.
# Why a wrapper module for k8s.io/kubernetes: its go.mod pins every staging module at v0.0.0 with a
# replace to ./staging, so `go install ...@v1.36.3` is refused; we generate a module whose replace lines are
# read from that real go.mod (no hand-kept list to drift).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.env
source "$here/versions.env"
QF_CACHE=${QF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-fleet}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0 GOFLAGS=${GOFLAGS:--mod=mod}

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

have_all() { # dir names...
  local dir=$1; shift
  for n in "$@"; do [ -x "$dir/$n" ] || return 1; done
}

build_k8s() {
  local out="$QF_CACHE/k8s/$K8S_VERSION/bin"
  have_all "$out" kube-apiserver kube-controller-manager kube-scheduler kubectl && return 0
  log "building kubernetes $K8S_VERSION (cold: ~20-30 min on 2 cores)"
  local mod; mod=$(mktemp -d "${TMPDIR:-/tmp}/qf-k8s-mod.XXXXXX")
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local staging_v="v0.${K8S_VERSION#v1.}"
  (
    cd "$mod"
    go mod init qwen-fleet.local/k8sbin >/dev/null 2>&1
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [ -s "$gomod" ] || { log "could not download k8s.io/kubernetes@$K8S_VERSION go.mod"; exit 1; }
    local n=0
    for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "$gomod"); do
      go mod edit -replace="$m=$m@$staging_v"; n=$((n + 1))
    done
    [ "$n" -ge 30 ] || { log "only $n staging replaces found in $gomod"; exit 1; }
    log "generated $n replace lines from $gomod"
    go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    go mod tidy
    local ld="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
      ld="$ld -X $p.gitTreeState=clean -X $p.gitCommit=module-proxy -X $p.buildDate=1970-01-01T00:00:00Z"
    done
    mkdir -p "$out.tmp"
    for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
      log "go build $c"
      go build -trimpath -ldflags "$ld" -o "$out.tmp/$c" "k8s.io/kubernetes/cmd/$c"
    done
  )
  mkdir -p "$(dirname "$out")"; rm -rf "$out"; mv "$out.tmp" "$out"; rm -rf "$mod"
}

build_etcd() {
  local out="$QF_CACHE/etcd/$ETCD_VERSION/bin"
  have_all "$out" etcd && return 0
  log "building etcd $ETCD_VERSION"
  local mod; mod=$(mktemp -d "${TMPDIR:-/tmp}/qf-etcd-mod.XXXXXX")
  (
    cd "$mod"
    go mod init qwen-fleet.local/etcdbin >/dev/null 2>&1
    go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go mod tidy
    mkdir -p "$out.tmp"
    go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3
  )
  rm -rf "$out"; mv "$out.tmp" "$out"; rm -rf "$mod"
}

build_kwok() {
  local out="$QF_CACHE/kwok/$KWOK_VERSION/bin"
  have_all "$out" kwok && [ -d "$QF_CACHE/kwok/$KWOK_VERSION/stages" ] && return 0
  log "building kwok $KWOK_VERSION"
  mkdir -p "$out"
  GOBIN="$out" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # Standalone kwok has no built-in stages; copy the ones shipped in the module (read-only in the mod cache).
  local src; src=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$QF_CACHE/kwok/$KWOK_VERSION/stages.tmp"
  mkdir -p "$QF_CACHE/kwok/$KWOK_VERSION/stages.tmp"
  cp -r "$src/kustomize/stage/." "$QF_CACHE/kwok/$KWOK_VERSION/stages.tmp/"
  chmod -R u+w "$QF_CACHE/kwok/$KWOK_VERSION/stages.tmp"
  rm -rf "$QF_CACHE/kwok/$KWOK_VERSION/stages"
  mv "$QF_CACHE/kwok/$KWOK_VERSION/stages.tmp" "$QF_CACHE/kwok/$KWOK_VERSION/stages"
}

build_helm() {
  local out="$QF_CACHE/helm/$HELM_VERSION/bin"
  have_all "$out" helm && return 0
  log "building helm $HELM_VERSION"
  mkdir -p "$out"
  local major=${HELM_VERSION%%.*}
  GOBIN="$out" go install "helm.sh/helm/$major/cmd/helm@$HELM_VERSION"
}

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(etcd kwok helm k8s)
for c in "${components[@]}"; do
  case $c in
    k8s|etcd|kwok|helm) "build_$c" ;;
    *) log "unknown component: $c"; exit 2 ;;
  esac
done
log "binaries ready under $QF_CACHE"
