"""The real node refuses a working directory whose kubelet sockets would not fit a unix socket path, before it
claims anything; a kubelet started there exits at once ('Failed to create listener for podResources endpoint ...
bind: invalid argument', seen under pytest-xdist, whose popen-gwN directory made a test's tmp_path 10 bytes
longer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_fleet_dev.realnode import NodeBinaries, RealNode, RealNodeError


def _node(workdir: Path) -> RealNode:
    missing = Path("/nonexistent")
    return RealNode(workdir, NodeBinaries(missing, missing, missing), tie_to_parent=False)


def test_a_working_directory_too_long_for_the_kubelets_sockets_is_refused_with_the_figure() -> None:
    # The kubelet's pod-resources socket in the failed run: 116 bytes, made under <workdir>/node/kubelet.
    workdir = Path("/tmp/pytest-of-root/pytest-27/popen-gw0/test_a_second_real_node_cluste0/second")
    sock = workdir / "node" / "kubelet" / "pod-resources" / "2143857673"
    assert len(str(sock)) == 116
    with pytest.raises(RealNodeError, match=r"too long.*116 bytes where a unix socket path holds at most 107.*"
                                            r"at least 9 bytes shorter"):
        _node(workdir).create_network()


def test_a_working_directory_that_fits_goes_on_to_the_next_check() -> None:
    # 107 bytes exactly for the longest socket: accepted by this check, refused by the next (binaries missing).
    base = "/tmp/" + "d" * (107 - len("/tmp/") - len("/node/kubelet/pod-resources/1234567890"))
    assert len(base + "/node/kubelet/pod-resources/1234567890") == 107
    with pytest.raises(RealNodeError, match="real node components missing"):
        _node(Path(base)).create_network()
