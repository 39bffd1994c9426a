"""The product does not ship its test cluster: the operator process never imports qwen_fleet_dev (the local
control plane in devtools/), the operator image copies only operator/, and `qwen-fleet dev` without the dev
tools says so in one line."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "qwen_fleet"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)


def test_the_operator_process_imports_no_dev_tools() -> None:
    # Everything `qwen-fleet operator` loads before kopf runs: the CLI, the start-up checks, the handlers.
    done = _run("import sys, kopf\n"
                "from qwen_fleet import cli\n"
                "from qwen_fleet.reconcile import handlers, run\n"
                "from qwen_fleet.config import OperatorConfig\n"
                "handlers.register(kopf.OperatorRegistry(), handlers.Runtime(OperatorConfig()))\n"
                "print(sorted(m for m in sys.modules if m.startswith('qwen_fleet_dev')))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_only_the_dev_commands_of_the_cli_reach_the_dev_tools() -> None:
    importers = {}
    for path in PRODUCT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] == "qwen_fleet_dev" for n in names):
                importers.setdefault(path.relative_to(PRODUCT).as_posix(), []).append(node.lineno)
    assert set(importers) == {"cli.py"}, importers
    assert not (PRODUCT / "devcluster").exists()


def test_the_operator_image_copies_the_product_only() -> None:
    dockerfile = (ROOT / "images" / "operator" / "Dockerfile").read_text().splitlines()
    sources = {word for line in dockerfile if line.startswith("COPY") and "--from" not in line
               for word in line.split()[1:-1]}
    assert sources == {"images/operator/requirements.txt", "pyproject.toml", "README.md", "operator"}
    assert not list((ROOT / "operator").glob("qwen_fleet_dev*"))


def test_dev_commands_without_the_dev_tools_say_so() -> None:
    # As in the operator image: no qwen_fleet_dev anywhere on the path.
    done = _run("import sys\n"
                "class NoDevTools:\n"
                "    def find_spec(self, name, path=None, target=None):\n"
                "        if name == 'qwen_fleet_dev':\n"
                "            raise ModuleNotFoundError(\"No module named 'qwen_fleet_dev'\", name=name)\n"
                "sys.meta_path.insert(0, NoDevTools())\n"
                "from qwen_fleet.cli import main\nsys.exit(main(['dev', 'up']))")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().startswith("qwen-fleet: the local control plane is not part of this installation")
    assert "Traceback" not in done.stderr
