"""The real node's pure parts: the docker-archive writer, the CNI config, the containerd config."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

from qwen_fleet_dev.images import ImageSpec, write_docker_archive
from qwen_fleet_dev.nodefiles import NodeDirs, containerd_toml
from qwen_fleet_dev.nodenet import NodeNetwork


def _archive(tmp_path: Path) -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    program = tmp_path / "prog"
    program.write_bytes(b"#!/bin/sh\necho hi\n")
    spec = ImageSpec(tag="qwen-fleet.local/t:1", files={"bin/prog": program}, symlinks={"bin/alias": "prog"},
                     directories=("tmp",), cmd=("prog",))
    out = tmp_path / "t.tar"
    write_docker_archive(spec, out)
    return out, program


def test_the_docker_archive_names_the_image_and_its_layer_digests_match(tmp_path: Path) -> None:
    out, program = _archive(tmp_path)
    with tarfile.open(out) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        [entry] = manifest
        assert entry["RepoTags"] == ["qwen-fleet.local/t:1"]
        layer = tar.extractfile(entry["Layers"][0]).read()  # type: ignore[union-attr]
        config_raw = tar.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
    config = json.loads(config_raw)
    assert entry["Config"] == hashlib.sha256(config_raw).hexdigest() + ".json"
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Cmd"] == ["prog"] and config["os"] == "linux"
    with tarfile.open(fileobj=io.BytesIO(layer)) as rootfs:
        members = {m.name: m for m in rootfs.getmembers()}
        assert rootfs.extractfile("bin/prog").read() == program.read_bytes()  # type: ignore[union-attr]
    assert members["bin/alias"].issym() and members["bin/alias"].linkname == "prog"
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777


def test_the_same_inputs_give_the_same_image(tmp_path: Path) -> None:
    first, _ = _archive(tmp_path / "a")
    second, _ = _archive(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()


def test_the_cni_bridge_hands_out_the_node_networks_pod_range(tmp_path: Path) -> None:
    net = NodeNetwork(213)
    conf = net.cni_conflist(tmp_path / "ipam")
    bridge = conf["plugins"][0]
    assert bridge["bridge"] == "qfb-213" and bridge["isGateway"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.213.1.0/24", "gateway": "10.213.1.1"}]]
    assert net.node_ip == "10.213.0.2" and net.service_cidr == "10.213.128.0/20"


def test_containerd_keeps_all_its_state_under_the_node_directory(tmp_path: Path) -> None:
    dirs = NodeDirs(tmp_path / "node")
    config = tomllib.loads(containerd_toml(dirs))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    paths = [config["root"], config["state"], config["grpc"]["address"], cri["cni"]["conf_dir"],
             cri["containerd"]["runtimes"]["runc"]["options"]["Root"],
             config["plugins"]["io.containerd.internal.v1.opt"]["path"]]
    assert all(p.startswith(str(dirs.root) + "/") for p in paths), paths


def test_containerd_sockets_fit_a_unix_socket_path_however_deep_the_node_directory(tmp_path: Path) -> None:
    dirs = NodeDirs(tmp_path / ("deep" * 30) / "node", block=243)
    config = tomllib.loads(containerd_toml(dirs))
    # containerd also listens on <address>.ttrpc; sun_path holds 107 bytes and a NUL.
    assert len(config["grpc"]["address"] + ".ttrpc") <= 107
