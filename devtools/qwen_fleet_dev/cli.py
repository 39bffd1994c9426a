"""``qwen-fleet dev up`` / ``dev down``: the local control plane for people (make cluster-up/cluster-down)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import STATE_FILE, LocalCluster, stop_from_state


def dev_command(args: argparse.Namespace) -> int:
    workdir = Path(args.dir).resolve()
    if args.dev_command == "down":
        stopped = stop_from_state(workdir)
        print(f"stopped: {', '.join(stopped)}" if stopped else f"no running cluster recorded in {workdir}")
        return 0
    if (workdir / STATE_FILE).exists():
        print(f"qwen-fleet: a cluster is already recorded in {workdir}; run `qwen-fleet dev down --dir {args.dir}`",
              file=sys.stderr)
        return 1
    binaries.ensure(real_node=args.real_node)
    cluster = LocalCluster(workdir=workdir, tie_to_parent=False, real_node=args.real_node)
    cluster.start()
    print(f"cluster up in {cluster.startup_seconds:.1f}s: {cluster.server}")
    if cluster.real_node is not None and cluster.real_node.net is not None:
        net = cluster.real_node.net
        print(f"real node {cluster.real_node.name}: InternalIP {net.node_ip}, pods {net.pod_cidr}, "
              f"Services {net.service_cidr} (network namespace {net.netns})")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    print(f"kubectl: {cluster.bins.kubectl}   helm: {cluster.bins.helm}")
    return 0
