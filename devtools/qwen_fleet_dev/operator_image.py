"""The operator image of ``images/operator/Dockerfile``, built on this machine without a registry or a build daemon.

Three layers, as the Dockerfile's runtime stage has them:

1. the Debian bookworm Python 3.11 base of ``python_base`` (the engine image's: the same packages, so the same
   layer, stored once by containerd);
2. the image's user, 65532 (what the Dockerfile's ``groupadd``/``useradd`` add to ``/etc/passwd`` and
   ``/etc/group``);
3. ``/opt/qwen-fleet``: a venv with exactly ``images/operator/requirements.txt`` (``--no-deps``, the versions of
   ``requirements.lock``; a chart test keeps the two equal) and the operator package built from what the
   Dockerfile copies (``pyproject.toml``, ``README.md``, ``operator/``), checked with ``pip check`` and
   ``qwen-fleet --help``, byte-compiled.

The config is the Dockerfile's: ``ENTRYPOINT ["qwen-fleet", "operator"]``, ``USER 65532:65532``, its ``ENV``,
labels and exposed ports (a unit test reads them from the Dockerfile). Where the result differs from a
``docker build`` (Debian's interpreter, no pip in the venv, hash-checked byte code, a pinned build backend):
docs/real-node.md.

Cached under ``~/.cache/qwen-fleet/images/operator-<key>/`` (an unpacked docker-archive, like the engine
image), keyed by the content of everything that goes in: the requirements, the sources, the Debian package
files, the build tools' pins, the interpreter's minor version and the recipe's own modules. Building needs the
network (pip, apt); running the image does not.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from qwen_fleet_dev import cachelock
from qwen_fleet_dev.images import LOCAL_REGISTRY, PATH_ENV, RunConfig, TreeLayer, write_archive_dir
from qwen_fleet_dev.python_base import (
    BASE_GROUP,
    BASE_PASSWD,
    ImageBuildError,
    base_layer,
    base_rootfs,
    cache_root,
    debian_files,
    venv_layer,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
# The recipe is part of the key: these modules' own text (a changed step builds a new image).
RECIPE_FILES = ("devtools/qwen_fleet_dev/operator_image.py", "devtools/qwen_fleet_dev/python_base.py",
                "devtools/qwen_fleet_dev/images.py")
VENV_IN_IMAGE = "/opt/qwen-fleet"
REQUIREMENTS = "images/operator/requirements.txt"
# What the Dockerfile copies into its build stage (and images/operator/Dockerfile.dockerignore lets through).
SOURCE_FILES = ("pyproject.toml", "README.md")
SOURCE_TREE = "operator"
IGNORED_PARTS = ("__pycache__",)
IGNORED_SUFFIXES = (".egg-info", ".pyc")
# The build backend of pyproject.toml's [build-system] (setuptools>=78, wheel), pinned: pip's isolated build
# would otherwise take the newest release of each on the day of the build.
BUILD_CONSTRAINTS = ("setuptools==84.2.1", "wheel==0.48.0")
PYTHON_MINOR = "3.11"  # Debian bookworm's python3.11: the venv's wheels must be built for it (cp311)
# The Dockerfile's runtime stage, field by field (tests/unit/test_operator_image.py compares them).
USER = "65532:65532"
USER_NAME = "qwen-fleet"
RUN = RunConfig(
    entrypoint=("qwen-fleet", "operator"),
    user=USER,
    labels={"org.opencontainers.image.title": "qwen-fleet operator",
            "org.opencontainers.image.description":
                "Kubernetes operator that turns a QwenInference resource into a vLLM fleet",
            "org.opencontainers.image.licenses": "Apache-2.0"},
    exposed_ports=("8080/tcp", "8081/tcp"),
)
ENV = (f"PATH={VENV_IN_IMAGE}/bin:{PATH_ENV.removeprefix('PATH=')}", "PYTHONDONTWRITEBYTECODE=1",
       "PYTHONUNBUFFERED=1")
# Where the Dockerfile's build stage has the sources (WORKDIR /src): pip records it in the operator's
# direct_url.json, and so does this build.
SOURCES_IN_BUILD = "/src"


class OperatorImageError(ImageBuildError):
    pass


@dataclass(frozen=True)
class OperatorImage:
    tag: str  # qwen-fleet.local/operator:<version>-<key>
    archive: Path  # an unpacked docker-archive: manifest.json, the config, one directory per layer
    built_seconds: float  # 0 when it came from the cache

    @property
    def repository(self) -> str:
        return self.tag.rsplit(":", 1)[0]

    @property
    def version(self) -> str:
        return self.tag.rsplit(":", 1)[1]


# --- pure: what goes in, and the key ---------------------------------------------------------------------


def source_files(root: Path = REPO_ROOT) -> list[str]:
    """The files the Dockerfile copies for the operator's install, relative to ``root``, sorted."""
    out = [name for name in SOURCE_FILES if (root / name).is_file()]
    for path in sorted((root / SOURCE_TREE).rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or any(p in IGNORED_PARTS or p.endswith(IGNORED_SUFFIXES) for p in rel.parts):
            continue
        out.append(rel.as_posix())
    return sorted(out)


def image_key(root: Path, debs: Iterable[str], python_minor: str = PYTHON_MINOR) -> str:
    """A hash of everything the image is made of; a changed byte of any input gives another key."""
    digest = hashlib.sha256()
    for part in (python_minor, *BUILD_CONSTRAINTS, *debs):
        digest.update(part.encode() + b"\0")
    for name in [*RECIPE_FILES, REQUIREMENTS, *source_files(root)]:
        digest.update(name.encode() + b"\0" + hashlib.sha256((root / name).read_bytes()).digest())
    return digest.hexdigest()[:16]


def project_version(root: Path = REPO_ROOT) -> str:
    return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])


def image_tag(key: str, version: str) -> str:
    return f"{LOCAL_REGISTRY}/operator:{version}-{key[:12]}"


def user_files(passwd: str = BASE_PASSWD, group: str = BASE_GROUP) -> dict[str, str]:
    """/etc/passwd and /etc/group with the image's user added, as the Dockerfile's groupadd/useradd leave them."""
    uid, gid = USER.split(":")
    return {"etc/passwd": passwd + f"{USER_NAME}:x:{uid}:{gid}::/nonexistent:/usr/sbin/nologin\n",
            "etc/group": group + f"{USER_NAME}:x:{gid}:\n"}


def operator_venv_layer(venv: Path, sources: Path) -> TreeLayer:
    """The built venv at /opt/qwen-fleet, as if built there: the operator's direct_url.json names /src (not the
    scratch tree), its scripts' ``#!`` lines name /opt/qwen-fleet, and each RECORD holds the hashes and sizes of
    those files as the image has them. So the layer depends on the inputs only, not on where it was built."""
    old_url, new_url = f"file://{sources}".encode(), f"file://{SOURCES_IN_BUILD}".encode()
    old_venv, new_venv = str(venv).encode(), VENV_IN_IMAGE.encode()

    def in_image(path: Path) -> bytes | None:
        """A file's content in the image when it differs from the built one (the RECORD-listed files only)."""
        if path.name == "direct_url.json" and path.parent.name.endswith(".dist-info"):
            data = path.read_bytes()
            return data.replace(old_url, new_url) if old_url in data else None
        if path.parent == venv / "bin":
            data = path.read_bytes()
            return data.replace(old_venv, new_venv) if old_venv in data else None
        return None

    def rewrite(name: str, path: Path) -> bytes | None:
        if name.endswith(".dist-info/RECORD"):
            site_packages = path.parent.parent
            return record_in_image(path.read_text(), lambda rel: in_image(Path(
                os.path.normpath(site_packages / rel)))).encode()
        return in_image(path) if path.name == "direct_url.json" else None

    return venv_layer(venv, VENV_IN_IMAGE, extra_rewrite=rewrite)


def record_in_image(record: str, content: Callable[[str], bytes | None]) -> str:
    """An installed wheel's RECORD (``path,sha256=<urlsafe base64, unpadded>,size``) with the entries whose
    content differs in the image (``content(path)`` is not None) hashed and sized anew."""
    out = []
    for entry in record.splitlines():
        path, digest, _ = entry.rsplit(",", 2) if entry.count(",") >= 2 else (entry, "", "")
        data = content(path) if digest else None
        if data is None:
            out.append(entry)
            continue
        encoded = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        out.append(f"{path},sha256={encoded},{len(data)}")
    return "\n".join(out) + ("\n" if record.endswith("\n") else "")


# --- the build ------------------------------------------------------------------------------------------


def ensure_operator_image() -> OperatorImage:
    """The operator image from the cache, or built into it (cold: about a minute, ~70 MB)."""
    python = Path(sys.executable)
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    if minor != PYTHON_MINOR:
        raise OperatorImageError(f"the operator image's venv is built with Python {PYTHON_MINOR} (the image's "
                                 f"interpreter, Debian bookworm's), not {minor} ({python})")
    debs = debian_files()
    key = image_key(REPO_ROOT, debs)
    tag = image_tag(key, project_version())
    archive = cache_root() / f"operator-{key}"

    def done() -> OperatorImage | None:
        return OperatorImage(tag, archive, 0.0) if (archive / ".complete").exists() else None

    # Under the entry's lock (cachelock): a second set-up waits, then finds .complete and reuses the image.
    return cachelock.cached(f"images/operator-{key}", done, lambda: _build_image(python, tag, archive))


def _build_image(python: Path, tag: str, archive: Path) -> OperatorImage:
    """Build into ``archive`` (what an interrupted build left there is removed first); .complete comes last."""
    started = time.monotonic()
    shutil.rmtree(archive, ignore_errors=True)
    cache_root().mkdir(parents=True, exist_ok=True)
    with cachelock.step("operator-image", f"the operator image {tag}", "about a minute (pip, apt)",
                        why="the chart's operator pod on the real node", entry=archive.name), \
            tempfile.TemporaryDirectory(prefix="qf-operator-image-", dir=cache_root().parent) as scratch_dir:
        scratch = Path(scratch_dir)
        rootfs = base_rootfs(scratch)
        users = scratch / "users"
        for name, text in user_files((rootfs / "etc" / "passwd").read_text(),
                                     (rootfs / "etc" / "group").read_text()).items():
            (users / name).parent.mkdir(parents=True, exist_ok=True)
            (users / name).write_text(text)
        (users / "etc").chmod(0o755)
        sources = stage_sources(scratch / "src")
        venv = build_venv(python, scratch / "venv", sources, scratch)
        write_archive_dir(tag, [base_layer(rootfs), TreeLayer(users, ""), operator_venv_layer(venv, sources)],
                          ENV, archive, RUN)
    (archive / ".complete").write_text(tag + "\n")
    return OperatorImage(tag, archive, time.monotonic() - started)


def stage_sources(out: Path, root: Path = REPO_ROOT) -> Path:
    """Copy what the Dockerfile copies into a tree of its own (the install writes build files beside it)."""
    for name in source_files(root):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, out / name)
    return out


def _run(what: str, argv: list[str], **kwargs: object) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise OperatorImageError(f"{what} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-3000:]}")


def build_venv(python: Path, venv: Path, sources: Path, scratch: Path) -> Path:
    """The Dockerfile's build stage: the pinned requirements, then the operator, both --no-deps; pip check; the
    entry point's help; byte code compiled for the path the venv has in the image."""
    _run("python -m venv", [str(python), "-m", "venv", "--without-pip", str(venv)])
    constraints = scratch / "build-constraints.txt"
    constraints.write_text("\n".join(BUILD_CONSTRAINTS) + "\n")
    # This interpreter's pip (the project's pinned one) installs into the venv; the venv itself gets no pip.
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--python", str(venv / "bin" / "python")]
    _run("pip install -r requirements.txt", [*pip, "install", "--no-deps", "--no-compile", "-q",
                                             "-r", str(REPO_ROOT / REQUIREMENTS)])
    _run("pip install the operator", [*pip, "install", "--no-deps", "--no-compile", "-q",
                                      "--build-constraint", str(constraints), str(sources)])
    _run("pip check", [*pip, "check"])
    _run("qwen-fleet --help", [str(venv / "bin" / "qwen-fleet"), "--help"])
    # checked-hash: the layers' files carry mtime 0, so timestamp-checked byte code would look stale and be
    # recompiled in memory at every start (the root filesystem is read-only); -s/-p record the image's paths.
    _run("compileall", [str(venv / "bin" / "python"), "-m", "compileall", "-q", "--invalidation-mode",
                        "checked-hash", "-s", str(venv), "-p", VENV_IN_IMAGE, str(venv / "lib")])
    return venv


def image_config(archive: Path) -> dict[str, object]:
    """The config of a built image (what containerd and the kubelet read): Entrypoint, User, Env ..."""
    manifest = json.loads((archive / "manifest.json").read_text())[0]
    return dict(json.loads((archive / manifest["Config"]).read_text())["config"])
