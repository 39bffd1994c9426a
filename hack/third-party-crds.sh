#!/usr/bin/env bash
# The real CRDs of the third-party kinds the chart and the operator create, taken from the projects' own
# modules on the Go module proxy (the only place we may download from; the zips hold the CRD YAML the
# projects ship), pinned in hack/versions.env and cached outside the repository:
#
#   hack/third-party-crds.sh      prints the cache folder, one CRD per file:
#     monitoring.coreos.com_servicemonitors.yaml, monitoring.coreos.com_prometheusrules.yaml (Prometheus Operator)
#     cert-manager.io_certificates.yaml, cert-manager.io_issuers.yaml, cert-manager.io_clusterissuers.yaml
#     leaderworkerset.x-k8s.io_leaderworkersets.yaml (LeaderWorkerSet: multi-node replicas)
#     keda.sh_scaledobjects.yaml (KEDA: autoscaling.engine keda)
#     http.keda.sh_interceptorroutes.yaml (the KEDA HTTP add-on: autoscaling.scaleToZero)
#     inference.networking.k8s.io_inferencepools.yaml, inference.networking.x-k8s.io_inferenceobjectives.yaml
#       (the Gateway API Inference Extension: spec.routing)
#     gateway.networking.k8s.io_httproutes.yaml (the Gateway API, standard channel: spec.routing.gateway)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.env
source "$here/versions.env"
QF_CACHE=${QF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-fleet}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--mod=mod}
out="$QF_CACHE/crds/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION-cert-manager-$CERT_MANAGER_VERSION-lws-$LWS_VERSION-keda-$KEDA_VERSION"
out="$out-giex-$GATEWAY_API_INFERENCE_EXTENSION_VERSION-gwapi-$GATEWAY_API_VERSION-keda-http-$KEDA_HTTP_ADDON_VERSION"

module_dir() { # module@version -> its unpacked folder in the module cache
  go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'
}

# shellcheck source=hack/cache-lib.sh
source "$here/cache-lib.sh"
# Two set-ups at once would share $out.tmp: the second waits, then finds .complete.
[ -f "$out/.complete" ] || qf_lock "crds/$(basename "$out")"
if [ ! -f "$out/.complete" ]; then
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  po=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
  for kind in servicemonitors prometheusrules; do
    cp "$po/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$out.tmp/"
  done
  cm=$(module_dir "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION")
  for kind in certificates issuers clusterissuers; do
    cp "$cm/deploy/crds/cert-manager.io_$kind.yaml" "$out.tmp/"
  done
  lws=$(module_dir "sigs.k8s.io/lws@$LWS_VERSION")
  cp "$lws/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" "$out.tmp/"
  keda=$(module_dir "github.com/kedacore/keda/v2@$KEDA_VERSION")
  cp "$keda/config/crd/bases/keda.sh_scaledobjects.yaml" "$out.tmp/"
  keda_http=$(module_dir "github.com/kedacore/http-add-on@$KEDA_HTTP_ADDON_VERSION")
  cp "$keda_http/config/crd/bases/http.keda.sh_interceptorroutes.yaml" "$out.tmp/"
  giex=$(module_dir "sigs.k8s.io/gateway-api-inference-extension@$GATEWAY_API_INFERENCE_EXTENSION_VERSION")
  cp "$giex/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" \
     "$giex/config/crd/bases/inference.networking.x-k8s.io_inferenceobjectives.yaml" "$out.tmp/"
  gwapi=$(module_dir "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION")
  cp "$gwapi/config/crd/standard/gateway.networking.k8s.io_httproutes.yaml" "$out.tmp/"
  chmod u+w "$out.tmp"/*
  touch "$out.tmp/.complete"
  rm -rf "$out"; mv "$out.tmp" "$out"
fi
echo "$out"
