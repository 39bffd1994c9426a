"""What the locally built images share: a Debian bookworm Python 3.11 base layer, and venv layers on it.

The vLLM engine image (``engine_image``) and the operator image (``operator_image``) are both a Python venv on
Debian's own ``python3.11``. The base is unpacked from Debian's packages (``apt-get download`` + ``dpkg-deb
-x``; no maintainer scripts run, none are needed to run Python). Both images use the same package list, so their
base layers are the same bytes (the same digest): containerd stores the layer once.

A venv built on this machine (by ``python -m venv`` at some scratch path) is moved into the image by
:func:`venv_layer`: its interpreter links point at Debian's ``/usr/bin/python3.11``, its scripts' ``#!`` lines
and ``pyvenv.cfg`` at the venv's place in the image.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from qwen_fleet_dev import binaries
from qwen_fleet_dev.images import Rewrite, TreeLayer

PYTHON_IN_IMAGE = "/usr/bin/python3.11"
# python3.11 and its shared-library closure (apt-cache depends --recurse), less what only maintainer scripts
# use (perl, debconf, dpkg), plus the engine's own: libgomp1, libnuma1, libstdc++6, and a shell with lscpu
# (vLLM's CPU backend runs ``lscpu --json ...`` through /bin/sh to pick the cores its threads bind to). The
# operator needs none of the engine's extras; it shares the list so that it shares the layer.
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
BASE_PASSWD = "root:x:0:0:root:/root:/bin/sh\n"
BASE_GROUP = "root:x:0:\n"


class ImageBuildError(RuntimeError):
    pass


def cache_root() -> Path:
    """Where built images are kept: ``$QF_CACHE/images`` (default ``~/.cache/qwen-fleet/images``)."""
    return binaries.cache_root() / "images"


def debian_files(packages: Sequence[str] = DEBIAN_PACKAGES) -> list[str]:
    """The .deb file names (name_version_arch) apt would download today: part of an image's cache key."""
    out = subprocess.run(["apt-get", "download", "--print-uris", *packages], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise ImageBuildError(f"apt-get download --print-uris failed: {out.stderr.strip()}")
    return sorted(line.split()[1] for line in out.stdout.splitlines() if line.startswith("'"))


def base_rootfs(scratch: Path, packages: Sequence[str] = DEBIAN_PACKAGES) -> Path:
    """Debian's packages unpacked into one tree, with the few files a container expects."""
    debs, rootfs = scratch / "debs", scratch / "rootfs"
    debs.mkdir()
    rootfs.mkdir()
    got = subprocess.run(["apt-get", "download", *packages], cwd=debs, capture_output=True, text=True,
                         check=False)
    if got.returncode != 0:
        raise ImageBuildError(f"apt-get download failed: {got.stderr.strip()}")
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(rootfs)], check=True)
    (rootfs / "etc" / "passwd").write_text(BASE_PASSWD)
    (rootfs / "etc" / "group").write_text(BASE_GROUP)
    for directory, mode in (("tmp", 0o1777), ("root", 0o700), ("proc", 0o755), ("sys", 0o755), ("dev", 0o755)):
        (rootfs / directory).mkdir(exist_ok=True)
        (rootfs / directory).chmod(mode)
    return rootfs


def base_layer(rootfs: Path) -> TreeLayer:
    return TreeLayer(rootfs, "", symlinks=BASE_SYMLINKS)


def venv_layer(venv: Path, dest: str, extra_rewrite: Rewrite | None = None) -> TreeLayer:
    """The venv at ``dest`` (e.g. /opt/vllm) in the image: its python links point at Debian's interpreter, its
    scripts and ``pyvenv.cfg`` at ``dest``. ``extra_rewrite`` may replace the content of other files."""
    old, where = str(venv).encode(), dest.strip("/")
    bin_dir = f"{where}/bin"

    def rewrite(name: str, path: Path) -> bytes | None:
        if name == f"{where}/pyvenv.cfg":
            return (f"home = {Path(PYTHON_IN_IMAGE).parent}\ninclude-system-site-packages = false\n"
                    f"version = 3.11\nexecutable = {PYTHON_IN_IMAGE}\n").encode()
        if name.startswith(f"{bin_dir}/") and path.stat().st_size < 65536:
            data = path.read_bytes()
            return data.replace(old, f"/{where}".encode()) if old in data else None
        return extra_rewrite(name, path) if extra_rewrite else None

    return TreeLayer(venv, where, skip=frozenset({".complete"}), rewrite=rewrite,
                     symlinks={f"{bin_dir}/python3": PYTHON_IN_IMAGE, f"{bin_dir}/python": "python3",
                               f"{bin_dir}/python3.11": "python3"})
