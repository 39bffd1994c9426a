"""Specs that are valid but costly: pure warnings, for ``qwen-fleet render`` and the operator's Events.

Refusing them would be wrong (a one-replica fleet without a spare GPU has no better rollout), saying nothing
would be worse: the cost shows only at the next spec change.
"""

from __future__ import annotations

from qwen_fleet.api.resource import QwenInferenceSpec

# The Event reason for rollout_warning (reconcile emits it as a Warning).
ONE_REPLICA_ROLLOUT_REASON = "RolloutStopsTheOnlyReplica"


def _single_replica(spec: QwenInferenceSpec) -> bool:
    """The fleet runs (or may run, when idle under autoscaling) exactly one replica of some Deployment."""
    if spec.pools:
        return any(pool.replicas == 1 for pool in spec.pools)
    if spec.autoscaling.enabled:
        return spec.autoscaling.min_replicas == 1
    return spec.replicas in (None, 1)


def _resolves_to_zero(value: int | str) -> bool:
    # A Deployment (and a LeaderWorkerSet) rounds a percentage maxSurge up: for one pod only 0 and 0% are 0.
    return str(value) in ("0", "0%")


def rollout_warning(spec: QwenInferenceSpec) -> str | None:
    """Why every spec change leaves the fleet without a serving replica for a whole model load, or None.

    With one replica and maxSurge 0 the rollout must take the old pod away before the new one may start
    (maxUnavailable is then at least 1: both 0 is refused, and the controller takes 1 when both round to 0),
    so from SIGTERM until the new pod has downloaded and loaded the model nothing serves."""
    if not _single_replica(spec) or not _resolves_to_zero(spec.rollout.max_surge):
        return None
    return ("one replica with rollout.maxSurge 0: every spec change stops the only replica before its "
            "replacement has loaded the model, so the fleet serves nothing for a whole model load; set "
            "rollout.maxSurge 1 and rollout.maxUnavailable 0 where a spare GPU exists, or run 2 replicas "
            "(docs/security.md, 'One replica and the default rollout')")
