"""The record a started cluster leaves in its working directory, and stopping a cluster from it.

``qwen-fleet dev up`` starts a cluster that outlives the command; ``dev down`` (another process) stops it
from this record.
"""

from __future__ import annotations

import json
from pathlib import Path

from qwen_fleet_dev.processes import alive, cmdline, terminate
from qwen_fleet_dev.realnode import clean_up_node

STATE_FILE = "cluster.json"


def stop_from_state(workdir: Path) -> list[str]:
    """Stop a cluster started by another process (``qwen-fleet dev down``); returns what was stopped."""
    path = workdir / STATE_FILE
    if not path.exists():
        return []
    state = json.loads(path.read_text())
    stopped = []
    for name, pid in reversed(list(state.get("pids", {}).items())):
        binary = state.get("binaries", {}).get(name)
        # Only signal a PID that still runs our binary: PIDs get reused.
        if alive(pid) and binary and binary in cmdline(pid):
            terminate(pid)
            stopped.append(name)
    node = state.get("real_node")
    if node:
        clean_up_node(Path(node["root"]), int(node["block"]))
        stopped.append("real node (containers, mounts, network namespace)")
    path.unlink()
    return stopped
