#!/usr/bin/env bash
# Install the container runtime of the real node from Debian's packages, pinned (the kubelet and kube-proxy
# are built from Go modules by hack/build-binaries.sh node).
#
#   hack/real-node-deps.sh          install what is missing (as root; apt-get update first)
#   hack/real-node-deps.sh --check  exit 1 and name what is missing, install nothing
#
# containerd and runc run the pods, the CNI plugins give them addresses on a bridge, iptables carries
# kube-proxy's Service rules (kube-proxy 1.36 clears conntrack entries over netlink: no conntrack tool),
# busybox-static is the one static binary our first test image is made of.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.env
source "$here/versions.env"
# shellcheck source=hack/cache-lib.sh
source "$here/cache-lib.sh"

packages=(
  "containerd=$DEB_CONTAINERD_VERSION"
  "runc=$DEB_RUNC_VERSION"
  "containernetworking-plugins=$DEB_CNI_PLUGINS_VERSION"
  "iptables=$DEB_IPTABLES_VERSION"
  "busybox-static=$DEB_BUSYBOX_STATIC_VERSION"
)

find_missing() {
  missing=()
  for spec in "${packages[@]}"; do
    name=${spec%%=*} want=${spec#*=}
    have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
    [ "$have" = "install ok installed $want" ] || missing+=("$spec")
  done
}
find_missing
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "${1:-}" = "--check" ]; then
  echo "real-node packages missing or at another version: ${missing[*]} (run hack/real-node-deps.sh)" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "hack/real-node-deps.sh: installing ${missing[*]} needs root" >&2
  exit 1
fi
install_missing() {
  # Under the lock: a set-up that waited for another one's install finds nothing missing (apt's own lock
  # refuses a second apt-get at once; it does not wait).
  find_missing
  [ ${#missing[@]} -eq 0 ] && return 0
  qf_step_start "apt-get install ${missing[*]%%=*}" "~1 min" "the real node's container runtime"
  apt-get update -q
  # --no-install-recommends: containerd's recommends would pull in docker-style tooling we do not use.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}
qf_cached "real-node-deps/debian" real-node-deps install_missing
