"""Layers written from directory trees (devcluster/images.py), as the engine image is built: read back with
``tarfile`` and hashed independently."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

from qwen_fleet_dev.images import TreeLayer, archive_members, write_archive_dir, write_tree_layer


def _tree(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_text("#!/old/venv/bin/python\nprint('hi')\n")
    (root / "bin" / "tool").chmod(0o755)
    (root / "bin" / "python3").symlink_to("/somewhere/python3.11")
    (root / "lib").mkdir()
    (root / "lib" / "data.bin").write_bytes(os.urandom(70_000))
    (root / ".complete").write_text("")
    return root


def _layer(root: Path) -> TreeLayer:
    def rewrite(name: str, path: Path) -> bytes | None:
        data = path.read_bytes()
        return data.replace(b"/old/venv", b"/opt/v") if name.startswith("opt/v/bin/") else None

    return TreeLayer(root, "opt/v", skip=frozenset({".complete"}), rewrite=rewrite,
                     symlinks={"opt/v/bin/python3": "/usr/bin/python3.11", "opt/v/bin/python": "python3"})


def test_a_tree_layer_holds_the_tree_under_dest_with_rewrites_and_symlinks(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    out = tmp_path / "layer.tar"
    digest = write_tree_layer(_layer(root), out)
    assert digest == hashlib.sha256(out.read_bytes()).hexdigest()
    with tarfile.open(out) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert list(members)[:2] == ["opt", "opt/v"]  # parents first
        assert ".complete" not in {n.rsplit("/", 1)[-1] for n in members}
        tool = tar.extractfile("opt/v/bin/tool")
        assert tool is not None and tool.read() == b"#!/opt/v/bin/python\nprint('hi')\n"
        assert members["opt/v/bin/tool"].mode == 0o755
        assert members["opt/v/bin/python3"].linkname == "/usr/bin/python3.11"  # replaced
        assert members["opt/v/bin/python"].linkname == "python3"  # added
        data = tar.extractfile("opt/v/lib/data.bin")
        assert data is not None and data.read() == (root / "lib" / "data.bin").read_bytes()
        assert {(m.uid, m.gid, m.mtime) for m in members.values()} == {(0, 0, 0)}


def test_the_same_tree_gives_the_same_digest(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    first = write_tree_layer(_layer(root), tmp_path / "a.tar")
    os.utime(root / "lib" / "data.bin", (1, 1))  # a touched file is the same content
    assert write_tree_layer(_layer(root), tmp_path / "b.tar") == first


def test_an_archive_dir_names_its_layers_by_digest(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    image_id = write_archive_dir("example.local/x:1", [_layer(root)], ["PATH=/opt/v/bin"], tmp_path / "img")
    manifest = json.loads((tmp_path / "img" / "manifest.json").read_text())[0]
    assert manifest["RepoTags"] == ["example.local/x:1"]
    layer = tmp_path / "img" / manifest["Layers"][0]
    config = json.loads((tmp_path / "img" / manifest["Config"]).read_bytes())
    assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer.read_bytes()).hexdigest()}"]
    assert image_id == "sha256:" + hashlib.sha256((tmp_path / "img" / manifest["Config"]).read_bytes()).hexdigest()
    assert archive_members(tmp_path / "img") == ["manifest.json", manifest["Config"], manifest["Layers"][0]]
