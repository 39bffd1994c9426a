"""A replica that spans nodes: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), one group of pods per replica.

The leader runs vLLM's API server and node rank 0; workers run `vllm serve --headless` with their rank from the
LWS webhook's LWS_WORKER_INDEX. All of a group's ranks rendezvous at $(LWS_LEADER_ADDRESS), so a group is only
useful whole: a pod restart recreates the group (RecreateGroupOnPodRestart), and the Service and the HPA's
metrics reach leaders only (the one API server of a group).

Startup policy LeaderCreated, not LeaderReady: the leader turns Ready (/health) only once every worker has
joined the rendezvous, so holding workers back until the leader is Ready would deadlock the group.
"""

from __future__ import annotations

import copy
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.group import GROUP
from qwen_fleet.plan import Plan
from qwen_fleet.preflight.report import GroupRendezvous, group_args
from qwen_fleet.render.common import CONTAINER_NAME, metadata, selector_labels
from qwen_fleet.render.deployment import PREFLIGHT_CONTAINER, render_deployment
from qwen_fleet.render.engine_args import HEADLESS_WORKER_COMMAND, MASTER_PORT, multi_node_args

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # set by LWS on every pod; "0" is the leader
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"  # set by LWS on every pod: the group (replica)
ROLE_LABEL = f"{GROUP}/role"
RENDEZVOUS_PORT_NAME = "rendezvous"
# The NCCL preflight's group store, held by the leader's init container. Not vLLM's MASTER_PORT: the two never
# run at once (init containers end first), but a distinct port keeps a lingering socket from the preflight out
# of vLLM's way. 29400 is torchrun's rendezvous port by convention.
PREFLIGHT_PORT = 29400
PREFLIGHT_PORT_NAME = "nccl-preflight"
# Pods of a group start apart (each node pulls the multi-GB image itself); the leader waits this long for them.
PREFLIGHT_RENDEZVOUS_TIMEOUT_S = 900.0
PREFLIGHT_GROUP = GroupRendezvous(nodes="$(LWS_GROUP_SIZE)", node_rank="$(LWS_WORKER_INDEX)",
                                  master_addr="$(LWS_LEADER_ADDRESS)", master_port=PREFLIGHT_PORT,
                                  timeout_s=PREFLIGHT_RENDEZVOUS_TIMEOUT_S)


def leader_selector(cr: QwenInference) -> dict[str, str]:
    """Pods of this fleet that serve the API: leaders of multi-node groups (all pods otherwise)."""
    if cr.spec.parallelism.nodes == 1:
        return selector_labels(cr)
    return {**selector_labels(cr), ROLE_LABEL: "leader"}


def _template(pod_template: dict[str, Any], role: str) -> dict[str, Any]:
    template = copy.deepcopy(pod_template)
    template["metadata"]["labels"][ROLE_LABEL] = role
    _join_group_preflight(template["spec"], leader=role == "leader")
    return template


def _join_group_preflight(pod_spec: dict[str, Any], *, leader: bool) -> None:
    """Every pod of the group runs the preflight as one all-reduce: rank = worker index x GPUs per pod + local
    rank. The LWS webhook injects LWS_* into init containers too; the kubelet expands the $(VAR)s in args."""
    for init in pod_spec.get("initContainers", []):
        if init["name"] != PREFLIGHT_CONTAINER:
            continue
        init["args"] = [*init["args"], *group_args(PREFLIGHT_GROUP)]
        if leader:
            init["ports"] = [{"name": PREFLIGHT_PORT_NAME, "containerPort": PREFLIGHT_PORT, "protocol": "TCP"}]


def _leader(cr: QwenInference, pod_template: dict[str, Any]) -> dict[str, Any]:
    template = _template(pod_template, "leader")
    container = template["spec"]["containers"][0]
    container["args"] = [*container["args"], *multi_node_args(cr, leader=True)]
    container["ports"].append({"name": RENDEZVOUS_PORT_NAME, "containerPort": MASTER_PORT, "protocol": "TCP"})
    return template


def _worker(cr: QwenInference, pod_template: dict[str, Any]) -> dict[str, Any]:
    template = _template(pod_template, "worker")
    template["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": CONTAINER_NAME}
    container = template["spec"]["containers"][0]
    container["command"] = list(HEADLESS_WORKER_COMMAND)
    container["args"] = [*container["args"], *multi_node_args(cr, leader=False)]
    # A headless worker serves no HTTP: no port, no /health. Its liveness is the process itself, and the
    # leader's probes cover the group (a dead worker fails the leader's collectives, which recreates the group).
    container.pop("ports", None)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        container.pop(probe, None)
    container.pop("lifecycle", None)  # preStop drains an API server; a worker has none
    return template


def render_leader_worker_set(cr: QwenInference, plan: Plan) -> dict[str, Any]:
    deployment = render_deployment(cr, plan)  # the single-node pod, made once; leader and worker start from it
    pod_template = deployment["spec"]["template"]
    spec: dict[str, Any] = {
        "leaderWorkerTemplate": {
            "size": cr.spec.parallelism.nodes,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": _leader(cr, pod_template),
            "workerTemplate": _worker(cr, pod_template),
        },
        "startupPolicy": "LeaderCreated",
        # One group at a time: a new group must load its model before an old one goes.
        "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {
            "maxUnavailable": cr.spec.rollout.max_unavailable, "maxSurge": cr.spec.rollout.max_surge}},
        # A headless Service per group, named after its leader pod (LWS_LEADER_ADDRESS = <leader>.<leader>.<ns>).
        # "Shared" would name one after the LeaderWorkerSet, the fleet's own Service's name: LWS leaves an existing
        # Service alone, so the leader's DNS name would never resolve and the group could not rendezvous.
        "networkConfig": {"subdomainPolicy": "UniquePerReplica"},
    }
    if plan.replicas is not None:  # under autoscaling the HPA owns replicas (the LWS scale subresource)
        spec["replicas"] = plan.replicas
    topology = cr.spec.scheduling.topology_key
    annotations = {EXCLUSIVE_TOPOLOGY_ANNOTATION: topology} if topology else None
    return {"apiVersion": LWS_API_VERSION, "kind": LWS_KIND, "metadata": metadata(cr, annotations=annotations),
            "spec": spec}
