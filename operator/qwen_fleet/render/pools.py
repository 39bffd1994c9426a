"""spec.pools: one Deployment per length-aware pool (docs/routing.md "Length-aware pools").

A pool's Deployment is the fleet's Deployment as that pool serves it (plan.pool_view: its maxModelLen,
maxNumSeqs, maxNumBatchedTokens and replicas over the fleet's spec), named ``<fleet>-<pool>`` and told apart by
the label ``qwenfleet.io/pool``: in its selector (two Deployments must never select each other's pods), its
pods' labels (the pool's InferencePool selects them) and its own labels (reconcile/kinds.py prunes a removed
pool's Deployment by it). The pods keep the fleet's ``qwenfleet.io/inference`` label, so the fleet's Service,
PodDisruptionBudget and ServiceMonitor cover every pool.
"""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.plan import Plan
from qwen_fleet.render.deployment import render_deployment
from qwen_fleet.render.routing import POOL_LABEL, pool_name, pool_selector


def render_pool_deployments(cr: QwenInference, plan: Plan) -> list[dict[str, Any]]:
    out = []
    for pool in plan.pools:
        deployment = render_deployment(pool.view, pool.plan)
        name = pool.pool.name
        deployment["metadata"]["name"] = pool_name(cr, name)
        deployment["metadata"]["labels"][POOL_LABEL] = name
        deployment["spec"]["selector"]["matchLabels"] = pool_selector(cr, name)
        deployment["spec"]["template"]["metadata"]["labels"][POOL_LABEL] = name
        out.append(deployment)
    return out
