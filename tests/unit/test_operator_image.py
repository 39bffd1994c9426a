"""The operator image's recipe (devtools/qwen_fleet_dev/operator_image.py), its pure parts: what goes in, the
cache key, the user files, the venv layer as the image has it, and the config against images/operator/Dockerfile.
The build itself runs in tests/node (the image serves as the operator pod)."""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
import tarfile
from pathlib import Path

import pytest

from qwen_fleet_dev import operator_image as oi
from qwen_fleet_dev.images import write_tree_layer
from tests.chart.test_images import OPERATOR as DOCKERFILE
from tests.chart.test_images import instructions

REPO = Path(__file__).resolve().parents[2]


def _fake_repo(root: Path) -> Path:
    for name in (*oi.RECIPE_FILES, oi.REQUIREMENTS, "pyproject.toml", "README.md", "operator/qwen_fleet/cli.py",
                 "operator/qwen_fleet/api/crd.py", "operator/qwen_fleet/catalog/vllm_flags.json",
                 "operator/qwen_fleet/__pycache__/cli.cpython-311.pyc", "operator/qwen_fleet.egg-info/PKG-INFO",
                 "operator/qwen_fleet/api/stale.pyc", "devtools/qwen_fleet_dev/cluster.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}\n")
    return root


def test_the_sources_are_what_the_dockerfile_copies(tmp_path: Path) -> None:
    root = _fake_repo(tmp_path)
    assert oi.source_files(root) == ["README.md", "operator/qwen_fleet/api/crd.py",
                                     "operator/qwen_fleet/catalog/vllm_flags.json", "operator/qwen_fleet/cli.py",
                                     "pyproject.toml"]
    real = oi.source_files(REPO)
    assert "operator/qwen_fleet/preflight/nccl_preflight.py" in real
    assert not [n for n in real if not (n.startswith("operator/") or n in ("pyproject.toml", "README.md"))]
    # The Dockerfile's context file lets through exactly these (and the requirements file).
    ignore = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().split()
    assert {"!pyproject.toml", "!README.md", "!operator/", f"!{oi.REQUIREMENTS}"} <= set(ignore)


@pytest.mark.parametrize("changed", ["operator/qwen_fleet/cli.py", "pyproject.toml", oi.REQUIREMENTS,
                                     "devtools/qwen_fleet_dev/operator_image.py"])
def test_a_changed_input_changes_the_key(tmp_path: Path, changed: str) -> None:
    root = _fake_repo(tmp_path)
    debs = ["python3.11_3.11.2-6+deb12u6_amd64.deb"]
    before = oi.image_key(root, debs)
    assert oi.image_key(root, debs) == before  # stable
    (root / changed).write_text((root / changed).read_text() + " ")
    assert oi.image_key(root, debs) != before


def test_what_is_not_an_input_leaves_the_key_alone(tmp_path: Path) -> None:
    root = _fake_repo(tmp_path)
    debs = ["python3.11_3.11.2-6+deb12u6_amd64.deb"]
    before = oi.image_key(root, debs)
    (root / "devtools/qwen_fleet_dev/cluster.py").write_text("changed\n")  # not in the image
    (root / "operator/qwen_fleet/__pycache__/cli.cpython-311.pyc").write_text("changed\n")
    assert oi.image_key(root, debs) == before
    assert oi.image_key(root, ["python3.11_3.11.2-6+deb12u7_amd64.deb"]) != before  # a Debian update
    assert oi.image_key(root, debs, python_minor="3.12") != before


def test_the_tag_names_the_local_registry_the_version_and_the_key() -> None:
    assert oi.image_tag("0123456789abcdef", "0.1.0") == "qwen-fleet.local/operator:0.1.0-0123456789ab"
    image = oi.OperatorImage("qwen-fleet.local/operator:0.1.0-0123456789ab", Path("/x"), 0.0)
    assert (image.repository, image.version) == ("qwen-fleet.local/operator", "0.1.0-0123456789ab")


def test_the_user_files_add_the_dockerfile_s_user_to_the_base() -> None:
    files = oi.user_files("root:x:0:0:root:/root:/bin/sh\n", "root:x:0:\n")
    assert files["etc/passwd"].splitlines() == ["root:x:0:0:root:/root:/bin/sh",
                                                "qwen-fleet:x:65532:65532::/nonexistent:/usr/sbin/nologin"]
    assert files["etc/group"].splitlines() == ["root:x:0:", "qwen-fleet:x:65532:"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_a_record_gets_the_hash_and_size_of_what_the_image_holds() -> None:
    record = ("../../../bin/tool,sha256=old,10\nqwen_fleet/cli.py,sha256=keep,5\n"
              "qwen_fleet-0.1.0.dist-info/RECORD,,\n")
    out = oi.record_in_image(record, lambda path: b"new" if path == "../../../bin/tool" else None)
    assert out == (f"../../../bin/tool,sha256={_b64(b'new')},3\nqwen_fleet/cli.py,sha256=keep,5\n"
                   "qwen_fleet-0.1.0.dist-info/RECORD,,\n")


def _fake_venv(root: Path, sources: Path) -> Path:
    venv = root / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    dist = site / "qwen_fleet-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (venv / "bin").mkdir()
    script = f"#!{venv}/bin/python\nfrom qwen_fleet.cli import main\n".encode()
    (venv / "bin" / "qwen-fleet").write_bytes(script)
    (venv / "bin" / "python3").symlink_to("/root/.pyenv/versions/3.11.7/bin/python3")
    (venv / "lib64").symlink_to("lib")
    (venv / "pyvenv.cfg").write_text(f"home = /root/.pyenv/versions/3.11.7/bin\ncommand = python -m venv {venv}\n")
    (site / "qwen_fleet").mkdir()
    (site / "qwen_fleet" / "cli.py").write_text("def main(): ...\n")
    url = json.dumps({"dir_info": {}, "url": f"file://{sources}"}).encode()
    (dist / "direct_url.json").write_bytes(url)
    (dist / "RECORD").write_text(f"../../../bin/qwen-fleet,sha256={_b64(script)},{len(script)}\n"
                                 f"qwen_fleet-0.1.0.dist-info/direct_url.json,sha256={_b64(url)},{len(url)}\n"
                                 "qwen_fleet-0.1.0.dist-info/RECORD,,\n")
    return venv


def test_the_venv_layer_is_the_venv_as_if_built_at_opt_qwen_fleet(tmp_path: Path) -> None:
    sources = tmp_path / "scratch-src"
    venv = _fake_venv(tmp_path, sources)
    write_tree_layer(oi.operator_venv_layer(venv, sources), tmp_path / "layer.tar")
    with tarfile.open(tmp_path / "layer.tar") as tar:
        members = {m.name: m for m in tar.getmembers()}

        def read(name: str) -> bytes:
            f = tar.extractfile(name)
            assert f is not None
            return f.read()

        script = read("opt/qwen-fleet/bin/qwen-fleet")
        assert script.startswith(b"#!/opt/qwen-fleet/bin/python\n")
        assert members["opt/qwen-fleet/bin/python3"].linkname == "/usr/bin/python3.11"
        assert members["opt/qwen-fleet/bin/python"].linkname == "python3"
        assert members["opt/qwen-fleet/lib64"].linkname == "lib"
        assert read("opt/qwen-fleet/pyvenv.cfg").decode().splitlines()[0] == "home = /usr/bin"
        dist = "opt/qwen-fleet/lib/python3.11/site-packages/qwen_fleet-0.1.0.dist-info"
        url = read(f"{dist}/direct_url.json")
        assert json.loads(url)["url"] == "file:///src"  # where the Dockerfile's build stage has the sources
        assert read(f"{dist}/RECORD").decode().splitlines()[:2] == [
            f"../../../bin/qwen-fleet,sha256={_b64(script)},{len(script)}",
            f"qwen_fleet-0.1.0.dist-info/direct_url.json,sha256={_b64(url)},{len(url)}"]
        everything = b"".join(read(n) for n, m in members.items() if m.isfile())
        assert str(tmp_path).encode() not in everything  # nothing names the place it was built


def _final_stage() -> dict[str, list[str]]:
    steps = instructions(DOCKERFILE)
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM"):]
    out: dict[str, list[str]] = {}
    for word, rest in final:
        out.setdefault(word, []).append(rest)
    return out


def test_the_config_is_the_dockerfile_s_runtime_stage() -> None:
    final = _final_stage()
    assert list(oi.RUN.entrypoint) == json.loads(final["ENTRYPOINT"][0])
    assert final["USER"] == [oi.RUN.user]
    labels = dict(word.split("=", 1) for word in shlex.split(" ".join(final["LABEL"])))
    assert labels == dict(oi.RUN.labels)
    exposed = [f"{port}/tcp" for rest in final["EXPOSE"] for port in rest.split()]
    assert exposed == list(oi.RUN.exposed_ports)
    env = dict(word.split("=", 1) for word in shlex.split(" ".join(final["ENV"])))
    ours = dict(entry.split("=", 1) for entry in oi.ENV)
    assert env.pop("PATH") == "/opt/qwen-fleet/bin:$PATH" and ours.pop("PATH").startswith("/opt/qwen-fleet/bin:")
    assert env == ours
    assert ("COPY", f"--from=build {oi.VENV_IN_IMAGE} {oi.VENV_IN_IMAGE}") in instructions(DOCKERFILE)
