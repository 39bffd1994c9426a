"""`qwen-fleet bench-serving` against a cluster that is not there: one line and exit 2, no traceback."""

import subprocess
import sys
from pathlib import Path

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qwen_fleet.cli", "bench-serving", *args],
                          capture_output=True, text=True, timeout=120)


def test_unreachable_api_server(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    done = _run("my-fleet", "--kubeconfig", str(kubeconfig))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("qwen-fleet bench-serving: cannot reach the API server")


def test_missing_kubeconfig(tmp_path: Path) -> None:
    done = _run("my-fleet", "--kubeconfig", str(tmp_path / "absent"))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("qwen-fleet bench-serving: no usable kubeconfig")


def test_a_malformed_api_key_secret_is_refused_before_any_cluster_call(tmp_path: Path) -> None:
    done = _run("my-fleet", "--kubeconfig", str(tmp_path / "absent"), "--api-key-secret", "keys:")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("qwen-fleet bench-serving: --api-key-secret must be NAME or NAME:KEY, not 'keys:'")
