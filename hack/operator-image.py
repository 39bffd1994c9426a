#!/usr/bin/env python3
"""``make image``: the operator image of images/operator/Dockerfile, built without a container engine, written as
one docker-archive tar, and the commands that push it to a registry and install the chart from it.

The image is the one the real-node tests run (tests/node/conftest.py's ``operator_image`` fixture): the same
function, ``qwen_fleet_dev.operator_image.ensure_operator_image``, builds it or takes it from the cache
(``$QF_CACHE/images/operator-<key>/``, an unpacked docker-archive). Building needs a Debian bookworm machine
(``apt-get download`` of the base's packages) with Python 3.11 and the network; with a container engine,
``docker build -f images/operator/Dockerfile .`` builds the same recipe instead.

    hack/operator-image.py [OUT.tar]     (default build/operator-image.tar)
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path("build/operator-image.tar")
PUSHED_NAME = "qwen-fleet-operator"  # the repository's name under the user's registry


def write_tar(archive_dir: Path, out: Path) -> None:
    """The unpacked docker-archive as one tar (what ``docker load``, ``skopeo`` and ``crane`` read), manifest
    first; written beside ``out`` and renamed, so a tar at ``out`` is always whole."""
    from qwen_fleet_dev.images import archive_members

    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in archive_members(archive_dir):
            info = tar.gettarinfo(str(archive_dir / name), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with (archive_dir / name).open("rb") as f:
                tar.addfile(info, f)
    partial.rename(out)


def push_commands(tar: Path, version: str) -> list[str]:
    """What the user runs next: a push (either tool) and the chart's install from the pushed image."""
    target = f"${{REGISTRY}}/{PUSHED_NAME}:{version}"
    return [
        "REGISTRY=registry.example.com/you   # your registry and namespace; log in first (skopeo login / crane auth)",
        f"skopeo copy docker-archive:{tar} docker://{target}",
        f"#  or: crane push {tar} {target}",
        f"#  or: docker load -i {tar} && docker tag qwen-fleet.local/operator:{version} {target} && docker push "
        f"{target}",
        "helm install qwen-fleet charts/qwen-fleet -n qwen-fleet-system --create-namespace \\",
        f"  --set image.repository=${{REGISTRY}}/{PUSHED_NAME} --set image.tag={version}",
    ]


def main(argv: list[str]) -> int:
    from qwen_fleet_dev.operator_image import ensure_operator_image
    from qwen_fleet_dev.python_base import ImageBuildError

    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0]) if argv else DEFAULT_OUT
    print("==> the operator image (images/operator/Dockerfile's recipe, no container engine; cold about a minute)",
          flush=True)
    try:
        image = ensure_operator_image()
    except ImageBuildError as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
    built = f"built in {image.built_seconds:.0f} s" if image.built_seconds else "from the cache"
    write_tar(image.archive, out)
    print(f"==> {image.tag} ({built}): docker-archive {out} ({out.stat().st_size / 2**20:.0f} MiB)")
    print("==> push it to a registry your cluster pulls from, then install the chart from it:")
    for line in push_commands(out, image.version):
        print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
