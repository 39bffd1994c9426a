"""Container images written without a registry or a build daemon, as docker-archive tars for ``ctr import``.

A docker-archive is a tar holding one tar per layer, the image config (JSON) and a ``manifest.json`` that
names the image (``RepoTags``). containerd imports it into the ``k8s.io`` namespace, where the kubelet finds
it by name; pods then use ``imagePullPolicy: Never``. Layers are written deterministically (fixed mtimes,
sorted entries), so the same inputs give the same image ID.

The first images are made of Debian's static busybox: a tiny rootfs with a shell, ``httpd``, ``sleep``.
Large images (the vLLM engine, ``engine_image``) are written from directory trees: each layer is streamed to
a file and hashed as it is written, and the archive is kept unpacked (a directory) and streamed into
``ctr import`` as a tar, so gigabytes never sit in memory or on disk twice.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

BUSYBOX = Path("/bin/busybox")
LOCAL_REGISTRY = "qwen-fleet.local"
PAUSE_IMAGE = f"{LOCAL_REGISTRY}/pause:busybox"
BUSYBOX_IMAGE = f"{LOCAL_REGISTRY}/busybox:static"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ImageSpec:
    tag: str
    files: dict[str, Path]  # path in the image -> file on this machine
    symlinks: dict[str, str] = field(default_factory=dict)  # path in the image -> target
    directories: Sequence[str] = ()
    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()


def busybox_applets() -> list[str]:
    listed = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout
    return sorted(name for name in listed.split() if name and name != "busybox")


def busybox_image(tag: str = BUSYBOX_IMAGE, cmd: Sequence[str] = ("sh",)) -> ImageSpec:
    if not BUSYBOX.exists():
        raise FileNotFoundError(f"{BUSYBOX} missing: install busybox-static (hack/real-node-deps.sh)")
    return ImageSpec(
        tag=tag,
        files={"bin/busybox": BUSYBOX},
        symlinks={f"bin/{name}": "busybox" for name in busybox_applets()},
        directories=("tmp", "etc", "proc", "sys", "dev", "var/www", "root"),
        cmd=tuple(cmd),
    )


def pause_image() -> ImageSpec:
    """The sandbox (pause) container: only holds the pod's namespaces, so it sleeps; containerd stops it
    with SIGKILL."""
    return busybox_image(PAUSE_IMAGE, cmd=("sleep", "2147483647"))


def _layer_tar(spec: ImageSpec) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in sorted(set(spec.directories) | {"bin"}):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        for name, source in sorted(spec.files.items()):
            data = source.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in sorted(spec.symlinks.items()):
            if name in spec.files:
                continue
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


@dataclass(frozen=True)
class RunConfig:
    """What a container runs with, beyond ``Env``: the Dockerfile's ENTRYPOINT, CMD, USER, LABEL and EXPOSE.
    Unset fields are left out of the image config (so an image without them keeps its digest)."""

    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    user: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    exposed_ports: Sequence[str] = ()  # e.g. "8080/tcp"


def _image_config(layer_digests: Sequence[str], env: Sequence[str], run: RunConfig | None = None) -> bytes:
    run = run or RunConfig()
    settings: dict[str, Any] = {"Env": list(env), "Entrypoint": list(run.entrypoint) or None,
                                "Cmd": list(run.cmd) or None, "WorkingDir": "/"}
    if run.user:
        settings["User"] = run.user
    if run.labels:
        settings["Labels"] = dict(run.labels)
    if run.exposed_ports:
        settings["ExposedPorts"] = {port: {} for port in run.exposed_ports}
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": settings,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in layer_digests]},
        "history": [{"created_by": "qwen-fleet devcluster/images.py"} for _ in layer_digests],
    }
    return json.dumps(config, sort_keys=True).encode()


def write_docker_archive(spec: ImageSpec, out: Path) -> str:
    """Write the image as a docker-archive tar; returns its image ID (the config digest)."""
    layer = _layer_tar(spec)
    layer_digest = hashlib.sha256(layer).hexdigest()
    config_bytes = _image_config([layer_digest], [PATH_ENV], RunConfig(spec.entrypoint, spec.cmd))
    config_digest = hashlib.sha256(config_bytes).hexdigest()
    manifest = [{"Config": f"{config_digest}.json", "RepoTags": [spec.tag],
                 "Layers": [f"{layer_digest}/layer.tar"]}]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, mode="w") as tar:
        for name, data in ((f"{layer_digest}/layer.tar", layer), (f"{config_digest}.json", config_bytes),
                           ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return f"sha256:{config_digest}"


# --- images from directory trees -------------------------------------------------------------------------

# path in the image -> replacement bytes for a regular file, or None to keep the file's own content
Rewrite = Callable[[str, Path], bytes | None]


@dataclass(frozen=True)
class TreeLayer:
    """One layer: the tree under ``source`` placed at ``dest`` in the image (``dest`` without a leading /).

    ``skip`` names paths relative to ``source`` left out; ``rewrite`` may replace a file's content (e.g.
    a script's interpreter line); ``symlinks`` replace (or add) symlinks at paths in the image."""

    source: Path
    dest: str
    skip: frozenset[str] = frozenset()
    rewrite: Rewrite | None = None
    symlinks: dict[str, str] = field(default_factory=dict)


class _HashingWriter:
    """A write-only file that hashes what passes through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out, self.sha = out, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.out.write(data)


def _tree_entries(layer: TreeLayer) -> Iterator[tuple[tarfile.TarInfo, Path | bytes | None]]:
    """Every directory, file and symlink of the layer, sorted, with fixed owners and mtimes."""
    dest = layer.dest.strip("/")
    parts = dest.split("/") if dest else []
    for i in range(1, len(parts) + 1):  # the parent directories of dest
        yield _dir_info("/".join(parts[:i]), 0o755), None
    for root, dirs, files in os.walk(layer.source):
        dirs.sort()
        rel_root = os.path.relpath(root, layer.source)
        for name in sorted(dirs + files):
            rel = os.path.normpath(os.path.join(rel_root, name))
            if rel in layer.skip:
                if name in dirs:
                    dirs.remove(name)
                continue
            yield from _tree_entry(layer, Path(root) / name, f"{dest}/{rel}" if dest else rel)


def _tree_entry(layer: TreeLayer, path: Path, name: str
                ) -> Iterator[tuple[tarfile.TarInfo, Path | bytes | None]]:
    st = path.lstat()
    if name in layer.symlinks or stat.S_ISLNK(st.st_mode):
        info = tarfile.TarInfo(name)
        info.type, info.linkname = tarfile.SYMTYPE, layer.symlinks.get(name) or os.readlink(path)
        yield info, None
    elif stat.S_ISDIR(st.st_mode):
        yield _dir_info(name, stat.S_IMODE(st.st_mode)), None
    elif stat.S_ISREG(st.st_mode):
        content = layer.rewrite(name, path) if layer.rewrite else None
        info = tarfile.TarInfo(name)
        info.mode, info.size = stat.S_IMODE(st.st_mode), st.st_size if content is None else len(content)
        yield info, path if content is None else content
    # sockets, fifos and devices have no place in an image


def _dir_info(name: str, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    return info


def write_tree_layer(layer: TreeLayer, out: Path) -> str:
    """Stream the layer's tar into ``out``, hashing as it goes; returns the layer's sha256 (its diff ID)."""
    written: set[str] = set()
    with out.open("wb") as raw:
        writer = _HashingWriter(raw)
        with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for info, content in _tree_entries(layer):
                _add(tar, info, content)
                written.add(info.name)
            for name in sorted(set(layer.symlinks) - written):  # symlinks the tree does not have
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, layer.symlinks[name]
                _add(tar, info, None)
    return writer.sha.hexdigest()


def _add(tar: tarfile.TarFile, info: tarfile.TarInfo, content: Path | bytes | None) -> None:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0  # the same tree gives the same layer digest
    if content is None:
        tar.addfile(info)
    elif isinstance(content, bytes):
        tar.addfile(info, io.BytesIO(content))
    else:
        with content.open("rb") as f:
            tar.addfile(info, f)


def write_archive_dir(tag: str, layers: Sequence[TreeLayer], env: Sequence[str], out: Path,
                      run: RunConfig | None = None) -> str:
    """Write a docker-archive, unpacked, into the directory ``out`` (``stream_archive`` tars it for
    ``ctr import``); returns the image ID. Layers are written under a temporary name, then renamed."""
    out.mkdir(parents=True, exist_ok=True)
    digests = []
    for index, layer in enumerate(layers):
        partial = out / f"layer-{index}.partial"
        digest = write_tree_layer(layer, partial)
        (out / digest).mkdir(exist_ok=True)
        partial.rename(out / digest / "layer.tar")
        digests.append(digest)
    config_bytes = _image_config(digests, env, run)
    config_digest = hashlib.sha256(config_bytes).hexdigest()
    (out / f"{config_digest}.json").write_bytes(config_bytes)
    manifest: list[dict[str, Any]] = [{"Config": f"{config_digest}.json", "RepoTags": [tag],
                                       "Layers": [f"{d}/layer.tar" for d in digests]}]
    (out / "manifest.json").write_text(json.dumps(manifest))
    return f"sha256:{config_digest}"


def archive_members(archive_dir: Path) -> list[str]:
    """The files of an unpacked docker-archive, manifest first: what ``ctr import`` reads."""
    manifest = json.loads((archive_dir / "manifest.json").read_text())[0]
    return ["manifest.json", manifest["Config"], *manifest["Layers"]]
