"""The real CRDs of the third-party kinds we create (hack/third-party-crds.sh: from the projects' own Go
modules, pinned in hack/versions.env, cached outside the repository)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def third_party_crds() -> tuple[Path, ...]:
    out = subprocess.run([str(ROOT / "hack" / "third-party-crds.sh")], check=True, capture_output=True,
                         text=True, timeout=600)
    folder = Path(out.stdout.strip().splitlines()[-1])
    files = tuple(sorted(folder.glob("*.yaml")))
    assert files, f"no CRDs in {folder}"
    return files


def crd_name(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["metadata"]["name"])
